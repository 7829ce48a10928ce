//! The arena's memory: one reservation at first (two for the tiered placement: the device tier,
//! then the host tier), more as it grows, up to a cap.
//!
//! Each reservation is a segment of the resolver (`Resolver::add_segment_in`), in a tier
//! (`orchestrator::placement`) that says how the driver is advised to keep its pages
//! ([`TierAdvice`]). Growth reserves one more segment, in the growth tier, of the first
//! reservations' size (less at the cap) when an allocation found no room or
//! more than three quarters of the blocks are taken; it runs on the runtime's grower thread,
//! which the resolver wakes then (the service thread never calls CUDA), and, for host
//! allocations, inline before one retry.
//!
//! Invariants: segments never overlap and are never released before the runtime ends; growth is
//! serialised (`grow_lock`), and a segment's memory is registered here before the resolver may
//! hand out any of its addresses, so every address the resolver gives lies in some reservation;
//! `tiers` has one entry per reservation, the tier the resolver was given for it.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use orchestrator::cpu::HostArena;
use orchestrator::{Resolver, Tier};
use ortree::VABLOCK_BYTES;
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::gpu::{ManagedArena, Residence};

/// How each tier's reservations are advised on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TierAdvice {
    /// The untiered reservations' advice (several devices: each arena lives on its own).
    pub untiered: Residence,
    /// The device the tiers are for.
    pub ordinal: i32,
}

impl TierAdvice {
    fn residence(self, tier: Tier) -> Residence {
        match tier {
            Tier::Any => self.untiered,
            Tier::Device => Residence::Device(self.ordinal),
            Tier::Host => Residence::HostMappedFor(self.ordinal),
        }
    }
}

/// Where the segments' memory comes from.
pub(crate) enum Reservations {
    /// `cuMemAllocManaged`, in the runtime's context.
    Managed {
        context: Arc<CudaContext>,
        allow_oversubscription: bool,
        advice: TierAdvice,
        segments: RwLock<Vec<ManagedArena>>,
    },
    /// Host memory (sim backend).
    Host {
        segments: RwLock<Vec<Arc<HostArena>>>,
    },
}

/// The arena: its reservations and how it grows.
pub(crate) struct ArenaMemory {
    reservations: Reservations,
    /// Each reservation's tier, in reservation order.
    tiers: RwLock<Vec<Tier>>,
    /// The tier growth reserves in.
    growth_tier: Tier,
    step_blocks: usize,
    cap_blocks: usize,
    grow_lock: Mutex<()>,
    /// Times [`ArenaMemory::grow_if_needed`] looked (the grower looks only when signalled).
    checks: std::sync::atomic::AtomicU64,
}

impl ArenaMemory {
    /// Reservations of `first` (blocks, tier) in order, growing in `growth_tier` up to
    /// `cap_blocks` in all.
    pub fn managed(
        context: &Arc<CudaContext>,
        first: &[(usize, Tier)],
        growth_tier: Tier,
        cap_blocks: usize,
        allow_oversubscription: bool,
        advice: TierAdvice,
    ) -> Result<Self> {
        let segments = first
            .iter()
            .map(|&(blocks, tier)| {
                ManagedArena::advised(
                    context,
                    blocks,
                    allow_oversubscription,
                    advice.residence(tier),
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self::of(
            Reservations::Managed {
                context: context.clone(),
                allow_oversubscription,
                advice,
                segments: RwLock::new(segments),
            },
            first,
            growth_tier,
            cap_blocks,
        ))
    }

    /// Host reservations of `first` (blocks, tier) in order (sim backend: tiers order the
    /// placement, nothing is advised), growing in `growth_tier` up to `cap_blocks`.
    pub fn host(first: &[(usize, Tier)], growth_tier: Tier, cap_blocks: usize) -> Self {
        let segments = first
            .iter()
            .map(|&(blocks, _)| Arc::new(HostArena::new(blocks)))
            .collect();
        Self::of(
            Reservations::Host {
                segments: RwLock::new(segments),
            },
            first,
            growth_tier,
            cap_blocks,
        )
    }

    fn of(
        reservations: Reservations,
        first: &[(usize, Tier)],
        growth_tier: Tier,
        cap_blocks: usize,
    ) -> Self {
        let blocks: usize = first.iter().map(|f| f.0).sum();
        Self {
            reservations,
            tiers: RwLock::new(first.iter().map(|f| f.1).collect()),
            growth_tier,
            step_blocks: blocks,
            cap_blocks: cap_blocks.max(blocks),
            grow_lock: Mutex::new(()),
            checks: Default::default(),
        }
    }

    /// Each reservation's tier, in reservation order (as [`ArenaMemory::segments`]).
    pub fn tiers(&self) -> Vec<Tier> {
        self.tiers.read().clone()
    }

    /// Times the grower looked whether the arena should grow.
    #[cfg(test)]
    pub(crate) fn growth_checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// (first byte, bytes) of every segment, in reservation order.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        match &self.reservations {
            Reservations::Managed { segments, .. } => segments
                .read()
                .iter()
                .map(|a| (a.base(), a.blocks() as u64 * VABLOCK_BYTES))
                .collect(),
            Reservations::Host { segments } => segments
                .read()
                .iter()
                .map(|a| (a.base(), a.blocks() as u64 * VABLOCK_BYTES))
                .collect(),
        }
    }

    /// Ask the driver to move every managed segment to device `ordinal` on `stream` (no-op for
    /// host segments); the caller synchronises.
    pub fn prefetch_to_device(
        &self,
        ordinal: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<()> {
        if let Reservations::Managed { segments, .. } = &self.reservations {
            for segment in segments.read().iter() {
                segment.prefetch_to_device(0, segment.bytes(), ordinal, stream)?;
            }
        }
        Ok(())
    }

    /// The host segments (sim backend), for CPU warps to keep at hand.
    pub fn host_segments(&self) -> Vec<Arc<HostArena>> {
        match &self.reservations {
            Reservations::Host { segments } => segments.read().clone(),
            Reservations::Managed { .. } => Vec::new(),
        }
    }

    fn blocks(&self) -> usize {
        self.segments()
            .iter()
            .map(|s| (s.1 / VABLOCK_BYTES) as usize)
            .sum()
    }

    /// Whether the arena may still grow.
    pub fn can_grow(&self) -> bool {
        self.blocks() < self.cap_blocks
    }

    /// Grow if the resolver ran out of room or is more than three quarters full. `Ok(true)` when
    /// a segment was added.
    pub fn grow_if_needed(&self, resolver: &Mutex<Resolver>) -> Result<bool> {
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let needed = {
            let mut r = resolver.lock();
            r.take_out_of_memory() || r.over_growth_mark()
        };
        if needed {
            self.grow(resolver)
        } else {
            Ok(false)
        }
    }

    /// Reserve one more segment and hand it to the resolver. `Ok(false)` at the cap.
    pub fn grow(&self, resolver: &Mutex<Resolver>) -> Result<bool> {
        let _serialised = self.grow_lock.lock();
        let blocks = self
            .step_blocks
            .min(self.cap_blocks.saturating_sub(self.blocks()));
        if blocks < 2 {
            return Ok(false);
        }
        let (base, bytes) = match &self.reservations {
            Reservations::Managed {
                context,
                allow_oversubscription,
                advice,
                segments,
            } => {
                let arena = ManagedArena::advised(
                    context,
                    blocks,
                    *allow_oversubscription,
                    advice.residence(self.growth_tier),
                )?;
                let range = (arena.base(), arena.blocks() as u64 * VABLOCK_BYTES);
                segments.write().push(arena);
                range
            }
            Reservations::Host { segments } => {
                let arena = Arc::new(HostArena::new(blocks));
                let range = (arena.base(), arena.blocks() as u64 * VABLOCK_BYTES);
                segments.write().push(arena);
                range
            }
        };
        self.tiers.write().push(self.growth_tier);
        resolver
            .lock()
            .add_segment_in(base, (bytes / VABLOCK_BYTES) as usize, self.growth_tier)?;
        tracing::info!(
            base = format_args!("{base:#x}"),
            bytes,
            total_blocks = self.blocks(),
            cap_blocks = self.cap_blocks,
            "arena grew"
        );
        Ok(true)
    }

    fn check_inside(&self, address: u64, len: usize) -> Result<()> {
        let inside = self.segments().iter().any(|&(base, bytes)| {
            address >= base && (address - base).checked_add(len as u64) <= Some(bytes)
        });
        if inside {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "{len} bytes at {address:#x} are outside the arena (a bug: bounds were checked)"
            )))
        }
    }

    /// Copy `bytes` to arena address `address`.
    pub fn copy_in(&self, address: u64, bytes: &[u8]) -> Result<()> {
        self.check_inside(address, bytes.len())?;
        match &self.reservations {
            // SAFETY: the range lies in a managed reservation (checked above), which the host may
            // access (the builder refused devices without concurrent managed access) and which
            // lives as long as `self`; `bytes` is a distinct host buffer.
            Reservations::Managed { .. } => unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), address as *mut u8, bytes.len());
            },
            Reservations::Host { segments } => {
                let segments = segments.read();
                let arena = segments
                    .iter()
                    .find(|a| a.contains(address, bytes.len() as u64))
                    .expect("checked above");
                arena.write_bytes(address, bytes);
            }
        }
        Ok(())
    }

    /// Copy `out.len()` bytes from arena address `address`.
    pub fn copy_out(&self, address: u64, out: &mut [u8]) -> Result<()> {
        self.check_inside(address, out.len())?;
        match &self.reservations {
            // SAFETY: as in `copy_in`, reading instead of writing.
            Reservations::Managed { .. } => unsafe {
                std::ptr::copy_nonoverlapping(address as *const u8, out.as_mut_ptr(), out.len());
            },
            Reservations::Host { segments } => {
                let segments = segments.read();
                let arena = segments
                    .iter()
                    .find(|a| a.contains(address, out.len() as u64))
                    .expect("checked above");
                arena.read_bytes(address, out);
            }
        }
        Ok(())
    }
}
