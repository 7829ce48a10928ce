//! The simulator's run: alignmalloc's lists changed by CPU warps through the runtime; after each
//! batch every list is read back through the runtime and walked on the host against the
//! reference. Then the CSR the host rebuilds, for its memory and time.

use alignmalloc::internals::{orchestrator, translator};
use alignmalloc::{Handle, Runtime};
use anyhow::{bail, ensure};
use orchestrator::LaneStatus;
use std::time::Instant;
use translator::WARP_LANES;

use super::plan::{Batch, HostLists};
use super::{BatchRow, CacheRow, Shared, csr, ms};

pub fn run(rt: &Runtime, s: &Shared<'_>) -> anyhow::Result<Vec<BatchRow>> {
    let mut rows = Vec::new();
    let mut handles = vec![Handle::NULL; s.vertices];
    let mut host = HostLists::new(s.vertices, s.args.list_growth);
    let steps = s.load.into_iter().map(|l| ("load", 0, l));
    let updates = s
        .batches
        .iter()
        .enumerate()
        .map(|(b, batch)| ("update", b + 1, batch));
    for (phase, number, batch) in steps.chain(updates) {
        let caches_before = rt.cache_stats();
        let started = Instant::now();
        let resized = apply(rt, batch, &mut handles, &mut host)?;
        let update_ms = ms(started);
        let caches = CacheRow::between(caches_before, rt.cache_stats());
        let walks_agree = if phase == "update" {
            // Read every list back through the runtime and walk what came back.
            let mut read: Vec<Vec<u32>> = Vec::with_capacity(s.vertices);
            for (v, &h) in handles.iter().enumerate() {
                let mut list = vec![0u32; host.lists[v].len()];
                if !h.is_null() {
                    rt.read(h, 0, bytemuck::cast_slice_mut(&mut list))?;
                }
                read.push(list);
            }
            let back = HostLists {
                lists: read,
                capacities: Vec::new(),
                growth: s.args.list_growth,
            };
            let digests = back.digests(s.walkers, s.args.length, s.args.seed);
            Some(digests == s.reference[number - 1])
        } else {
            None
        };
        let row = |system, update_ms, memory_bytes, walks_agree, caches| BatchRow {
            system,
            phase,
            batch: number as u32,
            edges: host.edges(),
            lists_resized: resized,
            update_ms,
            walk_ms: None,
            end_to_end_ms: None,
            memory_bytes,
            htod_bytes: None,
            walks_agree,
            caches,
        };
        rows.push(row(
            "alignmalloc",
            update_ms,
            host.list_bytes(),
            walks_agree,
            caches,
        ));
        if s.args.walks("csr-rebuild-host") {
            let started = Instant::now();
            let (offsets, neighbors) = csr(&host.lists);
            let bytes = offsets.len() as u64 * 8 + neighbors.len() as u64 * 4;
            // The host's own lists: the reference itself, which checks nothing.
            rows.push(row("csr-rebuild-host", ms(started), bytes, None, None));
        }
    }
    // Free every list from CPU warps: the allocator must be whole and empty.
    let live: Vec<Handle> = handles.into_iter().filter(|h| !h.is_null()).collect();
    ensure!(free_by_warps(rt, &live)? == 0, "freeing a list was refused");
    rt.drain_caches()?;
    rt.check_invariants()
        .map_err(|e| anyhow::anyhow!("allocator invariants after freeing: {e}"))?;
    ensure!(rt.is_empty(), "lists left allocated after freeing them all");
    Ok(rows)
}

/// Free `objects` from CPU warps, 32 to a warp; how many frees were refused.
fn free_by_warps(rt: &Runtime, objects: &[Handle]) -> anyhow::Result<usize> {
    let refused = parking_lot::Mutex::new(0usize);
    rt.run_warps(objects.len().div_ceil(WARP_LANES) as u32, |warp| {
        let (first, mask) = warp.lanes_of(objects.len() as u64);
        let lanes: [Handle; WARP_LANES] = std::array::from_fn(|l| {
            if mask >> l & 1 == 1 {
                objects[first as usize + l]
            } else {
                Handle::NULL
            }
        });
        let outcome = warp.free(mask, &lanes);
        *refused.lock() += (0..WARP_LANES)
            .filter(|&l| mask >> l & 1 == 1 && outcome.lanes[l] != LaneStatus::Ok)
            .count();
    })?;
    Ok(refused.into_inner())
}

/// Apply `batch` to the runtime's lists and to `host`: every list whose capacity changes moves
/// to a list of the new capacity allocated by CPU warps (none when it empties), its old one
/// freed by CPU warps; then each touched list is written through the runtime as the host has it.
/// How many lists moved or were freed.
fn apply(
    rt: &Runtime,
    batch: &Batch,
    handles: &mut [Handle],
    host: &mut HostLists,
) -> anyhow::Result<u64> {
    let before: Vec<u32> = batch
        .touched
        .iter()
        .map(|&v| host.capacities[v as usize])
        .collect();
    let resized = host.follow(batch)?;
    let moving: Vec<(u32, u32)> = batch
        .touched
        .iter()
        .zip(&before)
        .map(|(&v, &old)| (v, host.capacities[v as usize], old))
        .filter(|&(_, new, old)| new != old)
        .map(|(v, new, _)| (v, new))
        .collect();
    let growing: Vec<(u32, u32)> = moving.iter().copied().filter(|&(_, c)| c > 0).collect();
    let grown = parking_lot::Mutex::new(vec![Handle::NULL; growing.len()]);
    let failure = parking_lot::Mutex::new(None);
    rt.run_warps(growing.len().div_ceil(WARP_LANES) as u32, |warp| {
        let (first, mask) = warp.lanes_of(growing.len() as u64);
        let sizes: [u64; WARP_LANES] = std::array::from_fn(|l| {
            if mask >> l & 1 == 1 {
                u64::from(growing[first as usize + l].1) * 4
            } else {
                0
            }
        });
        match warp.malloc(mask, &sizes) {
            Ok(got) => {
                let mut g = grown.lock();
                for l in 0..WARP_LANES {
                    if mask >> l & 1 == 1 {
                        g[first as usize + l] = got[l];
                    }
                }
            }
            Err(status) => *failure.lock() = Some(status),
        }
    })?;
    if let Some(status) = failure.into_inner() {
        bail!("moving a list answered {status:?}");
    }
    let old: Vec<Handle> = moving
        .iter()
        .map(|&(v, _)| handles[v as usize])
        .filter(|h| !h.is_null())
        .collect();
    for &(v, _) in &moving {
        handles[v as usize] = Handle::NULL;
    }
    for (&(v, _), &h) in growing.iter().zip(grown.into_inner().iter()) {
        handles[v as usize] = h;
    }
    ensure!(
        free_by_warps(rt, &old)? == 0,
        "freeing a moved list's old place was refused"
    );
    for &v in &batch.touched {
        let (h, list) = (handles[v as usize], &host.lists[v as usize]);
        ensure!(
            !h.is_null() || list.is_empty(),
            "vertex {v} has neighbours and no list"
        );
        if !h.is_null() && !list.is_empty() {
            rt.write(h, 0, bytemuck::cast_slice(list))?;
        }
    }
    Ok(resized)
}
