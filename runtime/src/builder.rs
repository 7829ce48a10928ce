//! [`RuntimeBuilder`]: picks the backend at run time, sizes the arena, registers the mailbox and
//! starts the service thread.

use std::sync::{Arc, OnceLock};

use orchestrator::cpu::{CpuDevice, HostArena};
use orchestrator::{Mailbox, Resolver, ResolverConfig, Service, ServiceConfig};
use ortree::VABLOCK_BYTES;
use parking_lot::Mutex;
use translator::SlotOrder;

use crate::backend::{Backend, BackendChoice, BackendKind, CudaBackend, SimBackend};
use crate::error::{Error, Result};
use crate::gpu::{ManagedArena, PinnedMailbox};
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
    arena_fraction: f64,
    allow_oversubscription: bool,
    ports: usize,
    order: SlotOrder,
    service: ServiceConfig,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            device: 0,
            arena_bytes: None,
            arena_fraction: DEFAULT_ARENA_FRACTION,
            allow_oversubscription: false,
            ports: DEFAULT_PORTS,
            order: SlotOrder::Pattern,
            service: ServiceConfig::default(),
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
        let mailbox = Arc::new(Mailbox::new(self.ports)?);
        let backend = match opened {
            Some((context, info)) => self.cuda(context, info, &mailbox)?,
            None => {
                let bytes = self.arena_bytes.unwrap_or(DEFAULT_SIM_ARENA_BYTES);
                let blocks = arena_blocks(bytes)?;
                Backend::Sim(SimBackend {
                    arena: HostArena::new(blocks),
                    device: CpuDevice::new(mailbox.clone()),
                })
            }
        };
        let (base, bytes) = backend.arena();
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
        Ok(Runtime::new(backend, reason, resolver, mailbox, service))
    }

    fn cuda(
        &self,
        context: Arc<cudarc::driver::CudaContext>,
        info: crate::cuda::DeviceInfo,
        mailbox: &Arc<Mailbox>,
    ) -> Result<Backend> {
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
        let arch = info.nvrtc_arch().ok_or_else(|| {
            Error::Config(format!(
                "no NVRTC target for compute capability {:?}",
                info.compute_capability
            ))
        })?;
        let bytes = self
            .arena_bytes
            .unwrap_or((info.free_bytes as f64 * self.arena_fraction) as u64);
        let arena = ManagedArena::new(&context, arena_blocks(bytes)?, self.allow_oversubscription)?;
        let pinned = PinnedMailbox::new(&context, mailbox.clone())?;
        let stream = context.new_stream()?;
        Ok(Backend::Cuda(CudaBackend {
            context,
            info,
            stream,
            pinned,
            arena,
            arch,
            compiler: OnceLock::new(),
        }))
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
