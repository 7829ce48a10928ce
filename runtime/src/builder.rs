//! [`RuntimeBuilder`]: picks the backend at run time, sizes the arena, registers the mailbox and
//! starts the service thread.

use std::sync::{Arc, OnceLock};

use orchestrator::cpu::CpuDevice;
use orchestrator::{Mailbox, Resolver, ResolverConfig, Service, ServiceConfig};
use ortree::VABLOCK_BYTES;
use parking_lot::Mutex;
use translator::SlotOrder;

use crate::arena::ArenaMemory;
use crate::backend::{Backend, BackendChoice, BackendKind, CudaBackend, SimBackend};
use crate::error::{Error, Result};
use crate::gpu::PinnedMailbox;
use crate::runtime::Runtime;

/// Default share of free device memory the arena takes.
pub const DEFAULT_ARENA_FRACTION: f64 = 0.25;
/// Default arena of the sim backend (host memory, committed only where touched).
pub const DEFAULT_SIM_ARENA_BYTES: u64 = 4 << 30;
/// Default mailbox ports.
pub const DEFAULT_PORTS: usize = 8192;

/// How to build a [`Runtime`]. `Runtime::builder().build()` picks the GPU when there is one.
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    backend: BackendChoice,
    device: usize,
    arena_bytes: Option<u64>,
    max_arena_bytes: Option<u64>,
    arena_fraction: f64,
    allow_oversubscription: bool,
    ports: usize,
    order: SlotOrder,
    service: ServiceConfig,
    fault_counters: bool,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            device: 0,
            arena_bytes: None,
            max_arena_bytes: None,
            arena_fraction: DEFAULT_ARENA_FRACTION,
            allow_oversubscription: false,
            ports: DEFAULT_PORTS,
            order: SlotOrder::Pattern,
            service: ServiceConfig::default(),
            fault_counters: false,
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

    /// The arena's size in bytes, rounded down to 2 MiB (default: a quarter of free device
    /// memory on the GPU, 4 GiB of lazily committed host memory in the simulation).
    pub fn arena_bytes(mut self, bytes: u64) -> Self {
        self.arena_bytes = Some(bytes);
        self
    }

    /// Let the arena grow, by reservations of its first size, up to `bytes` in all (default: no
    /// growth). It grows when an allocation finds no room or three quarters of it are taken;
    /// each reservation must fit in free device memory unless oversubscription is allowed.
    pub fn max_arena_bytes(mut self, bytes: u64) -> Self {
        self.max_arena_bytes = Some(bytes);
        self
    }

    /// The share of free device memory the default arena takes (0 < fraction <= 1).
    pub fn arena_fraction(mut self, fraction: f64) -> Self {
        self.arena_fraction = fraction;
        self
    }

    /// Allow an arena larger than free device memory (a warning is logged). Off by default:
    /// managed memory past what the GPU holds is evicted and refetched on every pass.
    pub fn allow_oversubscription(mut self, allow: bool) -> Self {
        self.allow_oversubscription = allow;
        self
    }

    /// Mailbox ports (default 8192): more ports, fewer warps probing for one.
    pub fn ports(mut self, ports: usize) -> Self {
        self.ports = ports;
        self
    }

    /// Slot order of arranged chunks (default [`SlotOrder::Pattern`]).
    pub fn slot_order(mut self, order: SlotOrder) -> Self {
        self.order = order;
        self
    }

    /// How the service thread polls and batches.
    pub fn service(mut self, config: ServiceConfig) -> Self {
        self.service = config;
        self
    }

    /// Count unified-memory migrations and page faults with CUPTI (cuda backend, feature
    /// `cupti`); read them with [`Runtime::take_faults`]. Off by default: CUPTI adds work to
    /// every migration.
    pub fn fault_counters(mut self, on: bool) -> Self {
        self.fault_counters = on;
        self
    }

    /// Pick the backend, reserve the arena, register the mailbox and start the service thread.
    pub fn build(self) -> Result<Runtime> {
        if !(self.arena_fraction > 0.0 && self.arena_fraction <= 1.0) {
            return Err(Error::Config(format!(
                "arena fraction {} is not in (0, 1]",
                self.arena_fraction
            )));
        }
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
        let mailbox = Arc::new(Mailbox::new(self.ports)?);
        let (backend, memory) = match opened {
            Some((context, info)) => self.cuda(context, info, &mailbox)?,
            None => {
                let bytes = self.arena_bytes.unwrap_or(DEFAULT_SIM_ARENA_BYTES);
                let blocks = arena_blocks(bytes)?;
                let memory = ArenaMemory::host(blocks, self.cap_blocks(blocks));
                let backend = Backend::Sim(SimBackend {
                    device: CpuDevice::new(mailbox.clone()),
                });
                (backend, memory)
            }
        };
        let (base, bytes) = memory.segments()[0];
        let mut config = ResolverConfig::new(base, (bytes / VABLOCK_BYTES) as usize);
        config.order = self.order;
        let resolver = Arc::new(Mutex::new(Resolver::new(config)?));
        let service = Service::start(mailbox.clone(), resolver.clone(), self.service)
            .map_err(|e| Error::Config(format!("the service thread did not start: {e}")))?;
        tracing::info!(
            arena_bytes = bytes,
            base = format_args!("{base:#x}"),
            ports = self.ports,
            "runtime ready"
        );
        Ok(Runtime::new(
            backend,
            Arc::new(memory),
            reason,
            resolver,
            service,
        ))
    }

    /// The growth cap in blocks, at least the first reservation.
    fn cap_blocks(&self, blocks: usize) -> usize {
        self.max_arena_bytes
            .map_or(blocks, |cap| (cap / VABLOCK_BYTES) as usize)
            .max(blocks)
    }

    fn cuda(
        &self,
        context: Arc<cudarc::driver::CudaContext>,
        info: crate::cuda::DeviceInfo,
        mailbox: &Arc<Mailbox>,
    ) -> Result<(Backend, ArenaMemory)> {
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
            .arena_bytes
            .unwrap_or((info.free_bytes as f64 * self.arena_fraction) as u64);
        // Counting starts once the context exists and before the arena is reserved, so CUPTI
        // sees the managed allocation being made.
        #[cfg(feature = "cupti")]
        let faults = crate::faults::Counting::start(self.fault_counters, self.device)?;
        let blocks = arena_blocks(bytes)?;
        let memory = ArenaMemory::managed(
            &context,
            blocks,
            self.cap_blocks(blocks),
            self.allow_oversubscription,
        )?;
        let pinned = PinnedMailbox::new(&context, mailbox.clone())?;
        let stream = context.new_stream()?;
        let backend = Backend::Cuda(CudaBackend {
            context,
            info,
            stream,
            pinned,
            compiler: OnceLock::new(),
            #[cfg(feature = "cupti")]
            faults,
        });
        Ok((backend, memory))
    }
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
