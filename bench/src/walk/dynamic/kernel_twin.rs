//! The update kernels of device/kernels/graph_update.cuh (`update_lists`, which every list
//! system runs, and `rebuild_csr_vertex`, the GPU CSR's), run on host warps by `hostcheck`,
//! against their twin [`HostLists`]: the same batches leave the same lists, neighbour for
//! neighbour in the same order, with the same capacities. The walks of every system are checked
//! against walks over the twin's lists, so a drift between the two would fail every GPU run;
//! this finds it without a GPU. (On the GPU, each run of `walk` also compares the kernel's final
//! degrees and capacities with the twin's.)

use hostcheck::graph_update::{BatchArrays, Csr, HeapLists, rebuild_csr, update_codes};
use proptest::prelude::*;

use super::gpu::{ALLOC_FAILED, FREE_FAILED, MISSING_EDGE};
use super::plan::{Batch, HostLists, ListGrowth, rounds};
use crate::graph::Direction;

fn arrays(b: &Batch) -> BatchArrays<'_> {
    BatchArrays {
        touched: &b.touched,
        starts: &b.starts,
        adds: &b.adds,
        drop_starts: &b.drop_starts,
        drops: &b.drops,
    }
}

/// Edges among `vertices`, half of them from four hubs (ids 0-3) and all to neighbours 0-8: lists
/// longer than a warp, and neighbours that repeat (a multigraph, so deletions must pick the last
/// occurrences).
fn skewed_edges(vertices: u32, count: usize, seed: u64) -> Vec<(u32, u32)> {
    let mut state = seed | 1;
    (0..count)
        .map(|_| {
            state = crate::patterns::mix(state);
            let hub = state >> 40 & 1 == 1;
            let from = if hub {
                (state >> 20) as u32 % 4
            } else {
                (state >> 8) as u32 % vertices
            };
            (from, (state >> 32) as u32 % 9)
        })
        .collect()
}

/// The warps a launch gives `batch` (one per 32 touched vertices) and `extra` more.
fn warps(batch: &Batch, extra: u32) -> u32 {
    (batch.touched.len() as u32).div_ceil(32).max(1) + extra
}

fn same_lists(kernel: &HeapLists, host: &HostLists) -> Result<(), TestCaseError> {
    for v in 0..host.lists.len() {
        prop_assert_eq!(kernel.list(v), host.lists[v].as_slice(), "vertex {}", v);
        prop_assert_eq!(kernel.capacity(v), host.capacities[v], "vertex {}", v);
    }
    prop_assert_eq!(
        kernel.blocks(),
        kernel.held() as i64,
        "a list lost or freed twice"
    );
    Ok(())
}

fn csr_lists(csr: &Csr, v: usize) -> &[u32] {
    &csr.neighbors[csr.offsets[v] as usize..csr.offsets[v + 1] as usize]
}

#[test]
fn the_kernels_status_codes_are_the_ones_the_cli_reads() {
    let codes = update_codes();
    assert_eq!(
        (codes.alloc_failed, codes.free_failed, codes.missing_edge),
        (ALLOC_FAILED, FREE_FAILED, MISSING_EDGE)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A load and rounds of insertions and deletions, any growth, more warps than needed or not:
    /// the
    /// kernel's lists and the CSR rebuild's equal the twin's after every batch.
    #[test]
    fn the_update_kernels_leave_the_twins_lists(
        seed in any::<u64>(),
        edges in 60usize..400,
        per_round in 1u64..12,
        extra_warps in 0u32..5,
        growth in proptest::sample::select(ListGrowth::ALL.to_vec()),
    ) {
        let vertices = 40u32;
        let edges = skewed_edges(vertices, edges, seed);
        let (load, rounds) = rounds(&edges, Direction::Undirected, 4, per_round, seed).unwrap();
        let mut host = HostLists::new(vertices as usize, growth);
        let mut kernel = HeapLists::new(vertices as usize, growth.shift());
        let mut csr = Csr { offsets: vec![0; vertices as usize + 1], neighbors: Vec::new() };
        for batch in std::iter::once(&load).chain(&rounds) {
            host.apply(batch).unwrap();
            let statuses = kernel.update(arrays(batch), warps(batch, extra_warps), None).unwrap();
            prop_assert!(statuses.iter().all(|&s| s == 0), "{:?}", statuses);
            same_lists(&kernel, &host)?;
            let (next, statuses) = rebuild_csr(&mut csr, arrays(batch)).unwrap();
            prop_assert!(statuses.iter().all(|&s| s == 0), "{:?}", statuses);
            csr = next;
            for v in 0..vertices as usize {
                prop_assert_eq!(csr_lists(&csr, v), host.lists[v].as_slice(), "vertex {}", v);
            }
        }
    }

    /// Allocations that fail after the first `allowed`: a list that could not move keeps its
    /// place and capacity, loses its deletions and gains nothing, with the status the CLI reads;
    /// every other list is the twin's.
    #[test]
    fn a_list_that_cannot_move_keeps_its_place_and_says_so(
        seed in any::<u64>(),
        allowed in 0u64..6,
        extra_warps in 0u32..3,
    ) {
        let vertices = 40u32;
        let edges = skewed_edges(vertices, 300, seed);
        let (load, rounds) = rounds(&edges, Direction::Undirected, 1, 20, seed).unwrap();
        let mut host = HostLists::new(vertices as usize, ListGrowth::Double);
        let mut kernel = HeapLists::new(vertices as usize, 0);
        host.apply(&load).unwrap();
        kernel.update(arrays(&load), warps(&load, extra_warps), None).unwrap();
        let before = host.clone();
        let batch = &rounds[0];
        host.apply(batch).unwrap();
        let statuses = kernel.update(arrays(batch), warps(batch, extra_warps), Some(allowed)).unwrap();
        let mut moving = 0;
        for (t, &v) in batch.touched.iter().enumerate() {
            let v = v as usize;
            let (was, now) = (before.capacities[v], host.capacities[v]);
            moving += u64::from(now != was && now != 0);
            if statuses[t] == ALLOC_FAILED {
                let mut kept = HostLists { lists: vec![before.lists[v].clone()], capacities: vec![was], growth: before.growth };
                let drops: Vec<(u32, u32, u64)> = batch.drops_of(t).iter().map(|&x| (0, x, 0)).collect();
                kept.apply(&Batch::new(Vec::new(), drops)).unwrap();
                prop_assert_eq!(kernel.list(v), kept.lists[0].as_slice(), "vertex {}", v);
                prop_assert_eq!(kernel.capacity(v), was);
            } else {
                prop_assert_eq!(statuses[t], 0);
                prop_assert_eq!(kernel.list(v), host.lists[v].as_slice(), "vertex {}", v);
                prop_assert_eq!(kernel.capacity(v), now);
            }
        }
        let failed = statuses.iter().filter(|&&s| s == ALLOC_FAILED).count() as u64;
        prop_assert_eq!(failed, moving.saturating_sub(allowed));
        prop_assert_eq!(kernel.blocks(), kernel.held() as i64);
    }
}

#[test]
fn a_deleted_edge_that_is_not_there_is_missing_and_the_rest_applies() {
    let mut kernel = HeapLists::new(3, 0);
    let load = Batch::new(vec![(0, 1), (0, 2), (1, 2)], Vec::new());
    assert_eq!(kernel.update(arrays(&load), 1, None).unwrap(), vec![0, 0]);
    // Vertex 0 loses 2 and a 1 it has, vertex 1 a 0 it does not have; both gain a neighbour.
    let b = Batch::new(vec![(0, 0), (1, 0)], vec![(0, 2, 0), (1, 0, 0), (0, 1, 0)]);
    let statuses = kernel.update(arrays(&b), 1, None).unwrap();
    assert_eq!(statuses, vec![0, MISSING_EDGE]);
    assert_eq!(kernel.list(0), &[0]);
    assert_eq!(kernel.list(1), &[2, 0]);
    let mut csr = Csr {
        offsets: vec![0, 2, 3, 3],
        neighbors: vec![1, 2, 2],
    };
    let (next, statuses) = rebuild_csr(&mut csr, arrays(&b)).unwrap();
    assert_eq!(statuses, vec![0, MISSING_EDGE]);
    assert_eq!(next.offsets[..2], [0, 1]);
    assert_eq!(next.neighbors[..1], [0]);
}

#[test]
fn a_batch_outside_the_graph_is_refused_before_the_kernel_runs() {
    let mut kernel = HeapLists::new(2, 0);
    let b = Batch::new(vec![(5, 1)], Vec::new());
    let e = kernel.update(arrays(&b), 1, None).unwrap_err();
    assert_eq!(e.to_string(), "touched vertex 5 is not in a graph of 2");
    let one = Batch::new(vec![(1, 1)], Vec::new());
    let bad = BatchArrays {
        starts: &[0, 3],
        ..arrays(&one)
    };
    assert!(kernel.update(bad, 1, None).is_err());
    let many: Vec<(u32, u32)> = (0..2).flat_map(|u| (0..40).map(move |_| (u, 0))).collect();
    let mut kernel = HeapLists::new(64, 0);
    let spread = Batch::new((0..33).map(|u| (u, 1)).chain(many).collect(), Vec::new());
    let e = kernel.update(arrays(&spread), 1, None).unwrap_err();
    assert_eq!(e.to_string(), "33 touched vertices need at least 2 warps");
    assert_eq!(kernel.held(), 0);
}
