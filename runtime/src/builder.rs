//! [`RuntimeBuilder`]: picks the backend at run time, sizes the arena, registers the mailbox and
//! starts the service thread.

use std::sync::{Arc, OnceLock};

use orchestrator::caches::{CacheChannel, CacheKeeper, CpuCaches};
use orchestrator::cpu::{ClosedCheck, CpuDevice};
use orchestrator::{
    Mailbox, PlacementRule, Resolver, ResolverConfig, Service, ServiceConfig, Tier,
};
use ortree::VABLOCK_BYTES;
use parking_lot::Mutex;
use translator::SlotOrder;

use crate::arena::{ArenaMemory, TierAdvice};
use crate::backend::{Backend, BackendChoice, BackendKind, CudaBackend, SimBackend};
use crate::error::{Error, Result};
use crate::gpu::{PinnedCaches, PinnedMailbox, Residence};
use crate::runtime::Runtime;
use crate::settings::{
    DEFAULT_SIM_ARENA_BYTES, DeviceSettings, MAX_DEVICE_CACHE_FRACTION, Placement, Settings,
};

/// Most slabs the caches can name (slab ids fit 15 bits of a ring entry): a bound of at most
/// 64 GiB.
const MAX_CACHE_SLABS: usize = (1 << orchestrator::caches::channel::ENTRY_ID_BITS) - 1;

/// How to build a [`Runtime`]. `Runtime::builder().build()` picks the GPU when there is one.
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    backend: BackendChoice,
    device: usize,
    order: SlotOrder,
    fault_counters: bool,
    /// The devices the fault counters count (empty: this runtime's own).
    #[cfg_attr(not(feature = "cupti"), allow(dead_code))]
    counted_devices: Vec<usize>,
    device_advice: bool,
    settings: Settings,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            device: 0,
            order: SlotOrder::Pattern,
            fault_counters: false,
            counted_devices: Vec::new(),
            device_advice: false,
            settings: Settings::default(),
        }
    }
}

impl RuntimeBuilder {
    /// Which backend to run (default: [`BackendChoice::Auto`]).
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// The CUDA device ordinal (default 0).
    pub fn device(mut self, ordinal: usize) -> Self {
        self.device = ordinal;
        self
    }

    /// Whether fault counters are asked for.
    pub(crate) fn wants_fault_counters(&self) -> bool {
        self.fault_counters
    }

    /// The backend asked for.
    pub(crate) fn backend_choice(&self) -> BackendChoice {
        self.backend
    }

    /// Count faults on these devices too (one CUPTI subscriber per process: the runtime of a
    /// set that counts counts for every device of the set).
    pub(crate) fn counted_devices(mut self, ordinals: Vec<usize>) -> Self {
        self.counted_devices = ordinals;
        self
    }

    /// Advise the arena to live on this runtime's device and stay mapped for it (`cuMemAdvise`
    /// preferred location and accessed by; cuda backend). Off by default, where pages go to
    /// whichever processor touches them; [`crate::Devices`] turns it on, so one GPU's arena is
    /// not pulled onto another.
    pub fn device_advice(mut self, on: bool) -> Self {
        self.device_advice = on;
        self
    }

    /// The arena's size in bytes, rounded down to 2 MiB (default: a quarter of free device
    /// memory on the GPU, 4 GiB of lazily committed host memory in the simulation).
    pub fn arena_bytes(mut self, bytes: u64) -> Self {
        self.settings.arena_bytes = Some(bytes);
        self
    }

    /// Let the arena grow, by reservations of its first size, up to `bytes` in all (default: no
    /// growth). It grows when an allocation finds no room or three quarters of it are taken;
    /// each reservation must fit in free device memory unless oversubscription is allowed.
    pub fn max_arena_bytes(mut self, bytes: u64) -> Self {
        self.settings.max_arena_bytes = Some(bytes);
        self
    }

    /// The share of free device memory the default arena takes (0 < fraction <= 1).
    pub fn arena_fraction(mut self, fraction: f64) -> Self {
        self.settings.arena_fraction = fraction;
        self
    }

    /// Allow an arena larger than free device memory (a warning is logged). Off by default:
    /// managed memory past what the GPU holds is evicted and refetched on every pass.
    pub fn allow_oversubscription(mut self, allow: bool) -> Self {
        self.settings.allow_oversubscription = allow;
        self
    }

    /// Where the arena's pages live (default [`Placement::Migrate`]; docs/placement.md).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.settings.placement = placement;
        self
    }

    /// [`Placement::Tiered`]: bytes of the device tier (default: half the arena).
    pub fn device_tier_bytes(mut self, bytes: u64) -> Self {
        self.settings.device_tier_bytes = Some(bytes);
        self
    }

    /// [`Placement::Tiered`]: allocations whose largest object has at least `bytes` ask the
    /// device tier first, smaller ones the host tier (default 0: all ask the device tier first).
    pub fn hot_object_bytes(mut self, bytes: u64) -> Self {
        self.settings.hot_object_bytes = bytes;
        self
    }

    /// The first reservations (blocks, tier) of an arena of `blocks` blocks under the
    /// placement setting, and the tier growth reserves in.
    fn tier_layout(&self, blocks: usize) -> Result<(Vec<(usize, Tier)>, Tier)> {
        if self.device_advice && self.settings.placement != Placement::Migrate {
            return Err(Error::Config(format!(
                "ALIGNMALLOC_PLACEMENT={} and several devices' arenas both say where pages live: \
                 use the migrate placement with several devices",
                self.settings.placement.name()
            )));
        }
        Ok(match self.settings.placement {
            Placement::Migrate => (vec![(blocks, Tier::Any)], Tier::Any),
            Placement::HostMapped => (vec![(blocks, Tier::Host)], Tier::Host),
            Placement::Tiered => {
                let device = self
                    .settings
                    .device_tier_bytes
                    .map_or(blocks / 2, |b| (b / VABLOCK_BYTES) as usize);
                let host = blocks.saturating_sub(device);
                if device < 2 || host < 2 {
                    return Err(Error::Config(format!(
                        "ALIGNMALLOC_DEVICE_TIER_BYTES (or the builder's `device_tier_bytes`): a \
                         device tier of {device} blocks in an arena of {blocks} leaves a tier \
                         under two 2 MiB blocks; ask for a device tier of 4 MiB to {} bytes, or \
                         for a larger arena (ALIGNMALLOC_ARENA_BYTES)",
                        (blocks.saturating_sub(2) as u64) * VABLOCK_BYTES
                    )));
                }
                (vec![(device, Tier::Device), (host, Tier::Host)], Tier::Host)
            }
        })
    }

    /// Mailbox ports (default 8192): more ports, fewer warps probing for one.
    pub fn ports(mut self, ports: usize) -> Self {
        self.settings.ports = ports;
        self
    }

    /// Slot order of arranged chunks (default [`SlotOrder::Pattern`]).
    pub fn slot_order(mut self, order: SlotOrder) -> Self {
        self.order = order;
        self
    }

    /// How the service thread polls and batches.
    pub fn service(mut self, config: ServiceConfig) -> Self {
        self.settings.service = config;
        self
    }

    /// Count unified-memory migrations and page faults with CUPTI (cuda backend, feature
    /// `cupti`); read them with `Runtime::take_faults`. Off by default: CUPTI adds work to
    /// every migration.
    pub fn fault_counters(mut self, on: bool) -> Self {
        self.fault_counters = on;
        self
    }

    /// Most bytes the device caches may hold (whole 2 MiB blocks; 0 turns the caches off, and
    /// every allocation then asks the service thread). Default: half the arena
    /// ([`crate::settings::DEFAULT_DEVICE_CACHE_FRACTION`]).
    pub fn device_cache_bytes(mut self, bytes: u64) -> Self {
        self.settings.device_cache_bytes = Some(bytes);
        self
    }

    /// Most freed chunks the resolver holds back from reuse, so that a late second free of an
    /// object is told apart from a free of the next object at its address (default 1 024; 0
    /// reuses at once).
    pub fn quarantine_chunks(mut self, chunks: usize) -> Self {
        self.settings.quarantine_chunks = Some(chunks);
        self
    }

    /// The share of the arena's blocks past which a growable arena grows ahead of need (default
    /// 0.75; in (0, 1]).
    pub fn growth_mark(mut self, share: f64) -> Self {
        self.settings.growth_mark = share;
        self
    }

    /// How long [`Runtime::settle`] waits for the service thread (default 10 s).
    pub fn settle_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.settings.settle_timeout = timeout;
        self
    }

    /// How the kernels this runtime compiles back off while they wait (compiled in; see
    /// [`crate::settings::DeviceSettings`]).
    pub fn device_settings(mut self, device: DeviceSettings) -> Self {
        self.settings.device = device;
        self
    }

    /// The settings as set so far (the environment is applied at [`RuntimeBuilder::build`]).
    pub fn configured(&self) -> &Settings {
        &self.settings
    }

    /// Every setting at once ([`Settings`]; the other calls set one each).
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The caches' bound for an arena of `arena_blocks` blocks: 0 = none. A bound over
    /// [`MAX_DEVICE_CACHE_FRACTION`] of the arena is refused: slabs kept for scattered live
    /// objects would leave the host too little room for what the caches do not serve, and it
    /// would answer out of memory with the arena far from full.
    fn cache_blocks(&self, arena_blocks: usize) -> Result<usize> {
        let arena = arena_blocks as u64 * VABLOCK_BYTES;
        let most = (arena as f64 * MAX_DEVICE_CACHE_FRACTION) as u64;
        let bytes = match self.settings.device_cache_bytes {
            Some(bytes) if bytes > most => {
                return Err(Error::Config(format!(
                    "ALIGNMALLOC_DEVICE_CACHE_BYTES (or the builder's `device_cache_bytes`): \
                     {bytes} bytes is over {MAX_DEVICE_CACHE_FRACTION} of the {arena}-byte arena ({most} bytes): the host \
                     would have too little room left; ask for at most {most}, or for a larger \
                     arena (ALIGNMALLOC_ARENA_FRACTION, ALIGNMALLOC_ARENA_BYTES)"
                )));
            }
            Some(bytes) => bytes,
            None => (arena as f64 * self.settings.device_cache_fraction) as u64,
        };
        let blocks = (bytes / VABLOCK_BYTES) as usize;
        if blocks > MAX_CACHE_SLABS {
            tracing::warn!(
                asked = bytes,
                bound = MAX_CACHE_SLABS as u64 * VABLOCK_BYTES,
                "the device caches hold at most 64 GiB; bounded there"
            );
        }
        Ok(blocks.min(MAX_CACHE_SLABS))
    }

    /// The caches' bound as a share of the arena, when no byte count is given: in (0, 0.75]
    /// ([`Settings::device_cache_fraction`]; `ALIGNMALLOC_DEVICE_CACHE_FRACTION` overrides it).
    pub fn device_cache_fraction(mut self, fraction: f64) -> Self {
        self.settings.device_cache_fraction = fraction;
        self
    }

    /// Pick the backend, reserve the arena, register the mailbox and start the service thread.
    /// The process's `ALIGNMALLOC_*` variables override what the builder set
    /// ([`crate::settings`]).
    pub fn build(mut self) -> Result<Runtime> {
        self.settings = self.settings.with_environment()?;
        let (kind, reason, opened) = match self.backend {
            BackendChoice::Sim => (BackendKind::Sim, "asked for".to_string(), None),
            BackendChoice::Cuda => {
                let (context, info) = crate::cuda::open(self.device)?;
                let reason = format!("asked for; device {} is {}", self.device, info.name);
                (BackendKind::Cuda, reason, Some((context, info)))
            }
            BackendChoice::Auto => match crate::cuda::open(self.device) {
                Ok((context, info)) => {
                    let reason = format!("found {} (device {})", info.name, self.device);
                    (BackendKind::Cuda, reason, Some((context, info)))
                }
                Err(e) => (BackendKind::Sim, format!("no GPU: {e}"), None),
            },
        };
        tracing::info!(backend = ?kind, %reason, "backend chosen");
        if self.fault_counters {
            if kind != BackendKind::Cuda {
                return Err(Error::WrongBackend {
                    what: "fault counters",
                    needs: BackendKind::Cuda,
                    running: kind,
                });
            }
            if cfg!(not(feature = "cupti")) {
                return Err(Error::Config(
                    "fault counters need the runtime built with the `cupti` feature".into(),
                ));
            }
        }
        let mailbox = Arc::new(Mailbox::new(self.settings.ports)?);
        let (backend, memory, keeper) = match opened {
            Some((context, info)) => self.cuda(context, info, &mailbox)?,
            None => {
                let bytes = self.settings.arena_bytes.unwrap_or(DEFAULT_SIM_ARENA_BYTES);
                let blocks = arena_blocks(bytes)?;
                let cap = self.cap_blocks(blocks);
                let (first, growth) = self.tier_layout(blocks)?;
                let memory = ArenaMemory::host(&first, growth, cap);
                // The CPU warps read the closed flag as often as the CUDA client would.
                let check = ClosedCheck::every(self.settings.device.polls_per_closed_check);
                let mut device = CpuDevice::new(mailbox.clone()).with_closed_check(check);
                let keeper = match self.cache_blocks(blocks)? {
                    0 => None,
                    slabs => {
                        let channel = Arc::new(CacheChannel::new(slabs));
                        let caches = CpuCaches::new(channel.clone(), cap as u64);
                        device = device.with_caches(Arc::new(caches));
                        Some(keeper_of(channel, slabs))
                    }
                };
                (
                    Backend::Sim(SimBackend {
                        device,
                        launches: Default::default(),
                    }),
                    memory,
                    keeper,
                )
            }
        };
        let segments = memory.segments();
        let tiers = memory.tiers();
        let (base, bytes) = segments[0];
        let mut config = ResolverConfig::new(base, (bytes / VABLOCK_BYTES) as usize);
        config.order = self.order;
        if let Some(chunks) = self.settings.quarantine_chunks {
            config.quarantine_chunks = chunks;
        }
        config.growth_mark = self.settings.growth_mark;
        config.tier = tiers[0];
        config.placement = PlacementRule {
            hot_object_bytes: self.settings.hot_object_bytes,
        };
        let mut resolver = Resolver::new(config)?;
        for (&(base, bytes), &tier) in segments.iter().zip(&tiers).skip(1) {
            resolver.add_segment_in(base, (bytes / VABLOCK_BYTES) as usize, tier)?;
        }
        let resolver = Arc::new(Mutex::new(resolver));
        let service = Service::start_with_caches(
            mailbox.clone(),
            resolver.clone(),
            self.settings.service,
            keeper.clone(),
        )
        .map_err(|e| Error::Config(format!("the service thread did not start: {e}")))?;
        tracing::info!(
            arena_bytes = segments.iter().map(|s| s.1).sum::<u64>(),
            base = format_args!("{base:#x}"),
            placement = self.settings.placement.name(),
            ports = self.settings.ports,
            "runtime ready"
        );
        Ok(Runtime::new(
            backend,
            Arc::new(memory),
            reason,
            resolver,
            service,
            keeper,
            self.settings.settle_timeout,
        ))
    }

    /// The growth cap in blocks, at least the first reservation.
    fn cap_blocks(&self, blocks: usize) -> usize {
        self.settings
            .max_arena_bytes
            .map_or(blocks, |cap| (cap / VABLOCK_BYTES) as usize)
            .max(blocks)
    }

    fn cuda(
        &self,
        context: Arc<cudarc::driver::CudaContext>,
        info: crate::cuda::DeviceInfo,
        mailbox: &Arc<Mailbox>,
    ) -> Result<(Backend, ArenaMemory, Option<SharedKeeper>)> {
        use cudarc::driver::sys::CUdevice_attribute;
        let concurrent =
            context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?;
        if concurrent == 0 {
            return Err(Error::Config(format!(
                "{} lacks concurrent managed access; the host could not touch the arena while \
                 kernels run (use the sim backend)",
                info.name
            )));
        }
        let bytes = self
            .settings
            .arena_bytes
            .unwrap_or((info.free_bytes as f64 * self.settings.arena_fraction) as u64);
        // Counting starts once the context exists and before the arena is reserved, so CUPTI
        // sees the managed allocation being made.
        #[cfg(feature = "cupti")]
        let faults = crate::faults::Counting::start_on(
            self.fault_counters,
            match self.counted_devices.as_slice() {
                [] => std::slice::from_ref(&self.device),
                set => set,
            },
        )?;
        let blocks = arena_blocks(bytes)?;
        let (first, growth) = self.tier_layout(blocks)?;
        let ordinal = info.ordinal as i32;
        let memory = ArenaMemory::managed(
            &context,
            &first,
            growth,
            self.cap_blocks(blocks),
            self.settings.allow_oversubscription,
            TierAdvice {
                untiered: if self.device_advice {
                    Residence::Device(ordinal)
                } else {
                    Residence::Unadvised
                },
                ordinal,
            },
        )?;
        let mut pinned = PinnedMailbox::new(&context, mailbox.clone())?;
        let (caches, keeper) = match self.cache_blocks(blocks)? {
            0 => (None, None),
            slabs => {
                let channel = Arc::new(CacheChannel::new(slabs));
                let cap = self.cap_blocks(blocks) as u64;
                let caches = PinnedCaches::new(&context, channel.clone(), cap)?;
                pinned.set_caches(caches.device());
                (Some(caches), Some(keeper_of(channel, slabs)))
            }
        };
        let stream = context.new_stream()?;
        let backend = Backend::Cuda(CudaBackend {
            context,
            info,
            stream,
            pinned,
            caches,
            compiler: OnceLock::new(),
            device_settings: self.settings.device,
            #[cfg(feature = "cupti")]
            faults,
        });
        Ok((backend, memory, keeper))
    }
}

/// The host side of the caches, shared by the service thread and the runtime.
type SharedKeeper = Arc<Mutex<CacheKeeper>>;

/// The host side of caches of `slabs` blocks at most.
fn keeper_of(channel: Arc<CacheChannel>, slabs: usize) -> Arc<Mutex<CacheKeeper>> {
    tracing::info!(bytes = slabs as u64 * VABLOCK_BYTES, "device caches on");
    Arc::new(Mutex::new(CacheKeeper::new(
        channel,
        slabs as u64 * VABLOCK_BYTES,
    )))
}

/// VABlocks of an arena of `bytes` (rounded down): at least two.
fn arena_blocks(bytes: u64) -> Result<usize> {
    let blocks = bytes / VABLOCK_BYTES;
    if blocks < 2 {
        return Err(Error::Config(format!(
            "an arena of {bytes} bytes is under the minimum of two 2 MiB blocks"
        )));
    }
    usize::try_from(blocks).map_err(|_| Error::Config(format!("{bytes} bytes is too large")))
}
