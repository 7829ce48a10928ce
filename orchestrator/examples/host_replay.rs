//! The host's share of two GPU workloads, replayed against the resolver alone (no mailbox, no
//! GPU): how long the service thread spends per request when the device caches send it only
//! what they do not serve. A diagnostic for the mixed-size placement, not a benchmark of record
//! (criterion's `service` bench is).
//!
//! ```sh
//! cargo run --release -p orchestrator --example host_replay -- mixed 12
//! cargo run --release -p orchestrator --example host_replay -- soak 10
//! ```
//!
//! - `mixed ROUNDS`: the lanes over 32 KiB of each warp of a draw from the `alloc --tests mixed`
//!   bands (262 144 threads), as one request per warp, allocated then freed, round after round;
//!   per round the requests and microseconds per request, also for the requests with a MiB
//!   lane alone.
//! - `soak DENIED_PERCENT`: the soak's host stream: each warp step's lanes over 32 KiB (one lane
//!   in 64 asks 32-128 KiB), and DENIED_PERCENT of steps whole warps of 1 B-32 KiB (lanes whose
//!   class was denied a slab), a window of 4 096 live requests freed at random; per 200 000
//!   steps the microseconds per request and the allocation's median, 99th, 99.99th percentile
//!   and longest time.

use std::time::Instant;

use orchestrator::cpu::handles_from_reply;
use orchestrator::{Op, RequestRecord, Resolver, ResolverConfig};

const WARP: usize = 32;

/// SplitMix64.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn request(op: Op, words: [u64; WARP]) -> Option<RequestRecord> {
    let mask = (0..WARP).fold(0u32, |m, l| if words[l] > 0 { m | 1 << l } else { m });
    (mask != 0).then_some(RequestRecord {
        op: op as u32,
        lane_mask: mask,
        warp: 1,
        reserved: 0,
        words,
    })
}

fn free_of(resolver: &mut Resolver, alloc: &RequestRecord) -> Option<RequestRecord> {
    let reply = resolver.resolve(alloc);
    (reply.status == 0).then(|| {
        let handles = handles_from_reply(&reply, &alloc.words).map(|h| h.0);
        RequestRecord {
            op: Op::Free as u32,
            lane_mask: alloc.lane_mask,
            warp: 1,
            reserved: 0,
            words: handles,
        }
    })
}

fn mixed(rounds: u32) {
    // The bands of `alloc --tests mixed` (bench/src/alloc.rs MIX), per mille.
    let bands: [(u64, u64, u64); 5] = [
        (60, 0, 0),
        (520, 1, 256),
        (290, 257, 4 << 10),
        (126, (4 << 10) + 1, 64 << 10),
        (4, 1 << 20, 3 << 20),
    ];
    let sizes: Vec<u64> = (0..262_144u64)
        .map(|t| {
            let x = mix(t);
            let mut pick = x % 1000;
            for (share, lo, hi) in bands {
                if pick < share {
                    return lo + (x / 1000) % (hi - lo + 1);
                }
                pick -= share;
            }
            unreachable!("the shares add up to 1000")
        })
        .collect();
    let requests: Vec<RequestRecord> = sizes
        .chunks(WARP)
        .filter_map(|w| {
            request(
                Op::AllocContiguous,
                std::array::from_fn(|l| if w[l] > 32 << 10 { w[l] } else { 0 }),
            )
        })
        .collect();
    let with_mib = |r: &RequestRecord| r.words.iter().any(|&w| w >= 1 << 20);
    let mut resolver = Resolver::new(ResolverConfig::new(1 << 40, 4096)).expect("a valid arena");
    for round in 0..rounds {
        let (mut all, mut mib, mut n_mib) = (0.0, 0.0, 0);
        let mut frees = Vec::with_capacity(requests.len());
        for r in &requests {
            let started = Instant::now();
            let free = free_of(&mut resolver, r);
            let us = started.elapsed().as_secs_f64() * 1e6;
            all += us;
            if with_mib(r) {
                mib += us;
                n_mib += 1;
            }
            frees.extend(free);
        }
        for f in &frees {
            resolver.resolve(f);
        }
        println!(
            "round {round}: {} requests, {:.2} us each; the {n_mib} with a MiB lane {:.2} us each",
            requests.len(),
            all / requests.len() as f64,
            mib / f64::from(n_mib.max(1))
        );
    }
}

fn soak(denied_percent: u64) {
    let mut resolver = Resolver::new(ResolverConfig::new(1 << 40, 10_240)).expect("a valid arena");
    let mut state = 0x1234_5678_9ABC_DEF1u64;
    let mut next = move || {
        state = mix(state);
        state
    };
    let mut live: Vec<RequestRecord> = Vec::new();
    let mut times: Vec<u64> = Vec::new();
    let (mut requests, mut window_started) = (0u64, Instant::now());
    for step in 0..2_000_000u64 {
        let denied = next() % 100 < denied_percent;
        let words = std::array::from_fn(|_| {
            let x = next();
            if denied {
                1 + (x >> 16) % (1 << ((x >> 8) % 16))
            } else if x % 64 == 0 {
                (32 << 10) + 1 + (x >> 8) % (96 << 10)
            } else {
                0
            }
        });
        let op = if next() % 2 == 0 {
            Op::Alloc
        } else {
            Op::AllocContiguous
        };
        if let Some(alloc) = request(op, words) {
            let started = Instant::now();
            let free = free_of(&mut resolver, &alloc);
            times.push(started.elapsed().as_nanos() as u64);
            requests += 1;
            live.extend(free);
        }
        if live.len() > 4096 {
            let k = (next() % live.len() as u64) as usize;
            resolver.resolve(&live.swap_remove(k));
            requests += 1;
        }
        if step % 200_000 == 199_999 {
            times.sort_unstable();
            let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
            println!(
                "steps to {step}: {:.2} us per request; allocation p50 {} p99 {} p99.99 {} max {} ns",
                window_started.elapsed().as_secs_f64() * 1e6 / requests as f64,
                at(0.5),
                at(0.99),
                at(0.9999),
                at(1.0)
            );
            times.clear();
            requests = 0;
            window_started = Instant::now();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |default: u64| {
        args.get(1)
            .map_or(Ok(default), |s| s.parse::<u64>())
            .unwrap_or_else(|_| {
                eprintln!("the second argument is a whole number");
                std::process::exit(2)
            })
    };
    match args.first().map(String::as_str) {
        Some("mixed") => mixed(number(12) as u32),
        Some("soak") => soak(number(10)),
        _ => {
            eprintln!("usage: host_replay mixed [ROUNDS] | soak [DENIED_PERCENT]");
            std::process::exit(2)
        }
    }
}
