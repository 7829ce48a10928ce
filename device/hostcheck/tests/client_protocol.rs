//! The mailbox client, written twice: `detail/client.cuh` (what the GPU runs) and
//! `orchestrator::cpu::CpuDevice` (what the CPU warps run, and what loom checks). Each drives its
//! own mailbox, answered by the real service thread over its own resolver, with the same steps:
//! warps that allocate (arranged and thread-contiguous, every size class, lanes asking 0, sizes
//! over the limit, more than the arena holds), that free what they got by handle and by pointer,
//! waiting or posted, and that send second frees, interior pointers and made-up handles; then the
//! service stops and a last warp asks. Every lane's answer must be equal on both sides, and the
//! two resolvers must hold the same chunks.
//!
//! One warp runs at a time (warp 0, so both take the same port), and the C++ lanes take turns in
//! lane order between warp-wide instructions (`shim/simt.h`): each request reaches its service
//! alone, so both resolvers see the same requests in the same order.

use std::sync::Arc;

use hostcheck::cases::Rng;
use hostcheck::client::{FreeCall, HostClient, LaneAnswers};
use orchestrator::cpu::CpuDevice;
use orchestrator::{LaneStatus, Mailbox, Resolver, ResolverConfig, Service, ServiceConfig, Status};
use parking_lot::Mutex;
use translator::{Handle, HandleKind};

/// 48 VABlocks (96 MiB) at a made-up base: nothing is written there, and warps of large lanes
/// run out of it.
const ARENA_BASE: u64 = 1 << 40;
const ARENA_BLOCKS: usize = 48;

struct Side {
    mailbox: Arc<Mailbox>,
    resolver: Arc<Mutex<Resolver>>,
    service: Service,
}

impl Side {
    fn new() -> Self {
        let mailbox = Arc::new(Mailbox::new(8).unwrap());
        let config = ResolverConfig::new(ARENA_BASE, ARENA_BLOCKS);
        let resolver = Arc::new(Mutex::new(Resolver::new(config).unwrap()));
        let service =
            Service::start(mailbox.clone(), resolver.clone(), ServiceConfig::default()).unwrap();
        Self {
            mailbox,
            resolver,
            service,
        }
    }
}

fn draw_sizes(rng: &mut Rng, mask: u32) -> [u64; 32] {
    let class = rng.below(100);
    std::array::from_fn(|lane| {
        if mask >> lane & 1 == 0 || rng.below(10) == 0 {
            return 0;
        }
        match class {
            0..50 => rng.range(1, 2048),
            50..80 => rng.range(2049, 32 << 10),
            80..97 => rng.range((32 << 10) + 1, 4 << 20),
            _ => rng.range(1 << 30, 1 << 40),
        }
    })
}

/// What the CPU warp's lanes got, as the C++ lanes report it.
fn cpu_malloc(device: &CpuDevice, mask: u32, sizes: &[u64; 32], contiguous: bool) -> LaneAnswers {
    let mut out = LaneAnswers {
        handles: [0; 32],
        statuses: [0; 32],
        lane_statuses: [0; 32],
    };
    let (handles, status) = match device.malloc(0, mask, sizes, contiguous) {
        Ok(handles) => (handles.map(|h| h.0), Status::Ok),
        Err(status) => ([0; 32], status),
    };
    for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
        out.handles[lane] = handles[lane];
        out.statuses[lane] = status as u32;
    }
    out
}

fn cpu_free(device: &CpuDevice, mask: u32, words: &[u64; 32], how: FreeCall) -> LaneAnswers {
    let handles = words.map(Handle);
    let outcome = match how {
        FreeCall::Free => device.free(0, mask, &handles),
        FreeCall::PostFree => device.post_free(0, mask, &handles),
        FreeCall::FreePointer => device.free_pointers(0, mask, words),
    };
    let mut out = LaneAnswers {
        handles: [0; 32],
        statuses: [0; 32],
        lane_statuses: [0; 32],
    };
    for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
        out.statuses[lane] = outcome.status as u32;
        out.lane_statuses[lane] = outcome.lanes[lane] as u32;
    }
    out
}

fn assert_same(at: &str, mask: u32, a: &LaneAnswers, b: &LaneAnswers) {
    for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
        assert_eq!(
            (a.handles[lane], a.statuses[lane], a.lane_statuses[lane]),
            (b.handles[lane], b.statuses[lane], b.lane_statuses[lane]),
            "{at}: lane {lane} (handle, status, lane status): CPU warp, then the C++ client"
        );
    }
}

#[derive(Default)]
struct Seen {
    statuses: [u64; Status::COUNT],
    lane_statuses: [u64; 5],
}

fn run_case(seed: u64, steps: usize, seen: &mut Seen) {
    let mut rng = Rng(seed);
    let rust = Side::new();
    let cpp = Side::new();
    let device = CpuDevice::new(rust.mailbox.clone());
    let client = HostClient::new(&cpp.mailbox);
    // Each allocation's handles and sizes, while live.
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    for step in 0..steps {
        let at = format!("seed {seed}, step {step}");
        let mask = if rng.below(3) == 0 {
            u32::MAX
        } else {
            rng.next_u64() as u32 | 1
        };
        let (a, b) = if rng.below(100) < 45 {
            let sizes = draw_sizes(&mut rng, mask);
            let contiguous = rng.below(2) == 0;
            let a = cpu_malloc(&device, mask, &sizes, contiguous);
            let b = client.malloc(mask, &sizes, contiguous);
            for lane in (0..32).filter(|l| mask >> l & 1 == 1 && a.handles[*l] != 0) {
                live.push((a.handles[lane], sizes[lane]));
            }
            (a, b)
        } else {
            let how = match rng.below(10) {
                0..6 => FreeCall::Free,
                6..8 => FreeCall::PostFree,
                _ => FreeCall::FreePointer,
            };
            let words: [u64; 32] = std::array::from_fn(|lane| {
                if mask >> lane & 1 == 0 {
                    return 0;
                }
                let handle = match rng.below(100) {
                    0..6 if !freed.is_empty() => freed[rng.below(freed.len() as u64) as usize],
                    6..9 if !live.is_empty() => live[rng.below(live.len() as u64) as usize].0 + 16,
                    9..11 => {
                        Handle::plain(ARENA_BASE + rng.below(64 << 20), 0)
                            .unwrap()
                            .0
                    }
                    11..14 => 0,
                    _ if !live.is_empty() => {
                        let (h, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                        freed.push(h);
                        h
                    }
                    _ => 0,
                };
                let h = Handle(handle);
                match how {
                    // A pointer frees a thread-contiguous object by its first byte; an arranged
                    // handle's address is its lane's first tile, which the host judges.
                    FreeCall::FreePointer if h.kind() == HandleKind::Plain => h.address(),
                    FreeCall::FreePointer => h.translate(0),
                    _ => handle,
                }
            });
            let a = cpu_free(&device, mask, &words, how);
            let b = client.free(mask, &words, how);
            (a, b)
        };
        assert_same(&at, mask, &a, &b);
        for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
            seen.statuses[a.statuses[lane] as usize] += 1;
            seen.lane_statuses[a.lane_statuses[lane] as usize] += 1;
        }
    }
    // Posted frees are answered before the service stops: a last waiting free of nothing.
    let a = cpu_free(&device, 1, &[0; 32], FreeCall::Free);
    let b = client.free(1, &[0; 32], FreeCall::Free);
    assert_same(&format!("seed {seed}, the last free"), 1, &a, &b);
    {
        let (r, c) = (rust.resolver.lock(), cpp.resolver.lock());
        assert_eq!(r.live_chunks(), c.live_chunks(), "seed {seed}: chunks held");
        r.check_invariants().unwrap();
        c.check_invariants().unwrap();
    }
    // After the service stops, a warp's request is answered `Shutdown` on both.
    rust.service.stop();
    cpp.service.stop();
    rust.mailbox.close();
    cpp.mailbox.close();
    let sizes = [64u64; 32];
    let a = cpu_malloc(&device, u32::MAX, &sizes, false);
    let b = client.malloc(u32::MAX, &sizes, false);
    assert_same(&format!("seed {seed}, after the stop"), u32::MAX, &a, &b);
    assert!(b.statuses.iter().all(|&s| s == Status::Shutdown as u32));
}

#[test]
fn the_gpus_client_and_the_cpu_warps_twin_answer_every_lane_alike() {
    let mut seen = Seen::default();
    for seed in 1..=4 {
        run_case(seed * 0x9E37_79B9, 250, &mut seen);
    }
    for status in [
        Status::Ok,
        Status::OutOfMemory,
        Status::SizeOverLimit,
        Status::Partial,
    ] {
        assert!(
            seen.statuses[status as usize] > 0,
            "no lane answered {status:?}"
        );
    }
    for status in [
        LaneStatus::Ok,
        LaneStatus::DoubleFree,
        LaneStatus::InteriorPointer,
        LaneStatus::InvalidHandle,
    ] {
        assert!(
            seen.lane_statuses[status as usize] > 0,
            "no lane answered {status:?}"
        );
    }
}
