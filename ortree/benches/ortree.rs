//! Alloc/free throughput of the 64-ary `OrTree` against the paper's binary OR tree, and of the
//! warptree pool.
//!
//! Setup, the same for both trees: the first half of the units is allocated, then a random tenth of
//! that half is freed again (fragmented holes below a free frontier). Each measured iteration
//! allocates one run and frees the oldest of a window of live runs (1024 single units, or 128 runs
//! of 1..=64 units, about 4 Ki units), so the tree stays in a steady state. One iteration = one alloc/free pair; criterion reports pairs per second.

use std::collections::VecDeque;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ortree::baseline::BinaryOrTree;
use ortree::{OrTree, PortionPool};

const WINDOW: usize = 1024;
const RUN_WINDOW: usize = 128;
const SIZES: [(usize, &str); 2] = [(32 << 10, "32Ki"), (16 << 20, "16Mi")];

/// A tiny deterministic generator, so both trees see the same holes.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The operations both trees offer, so one driver measures both.
trait Tree {
    fn build(len: usize) -> Self;
    fn alloc(&mut self, count: usize) -> usize;
    fn free(&mut self, start: usize, count: usize);
}

/// Both trees have the same API; one implementation serves both.
macro_rules! impl_tree {
    ($($t:ty),*) => {$(
        impl Tree for $t {
            fn build(len: usize) -> Self {
                <$t>::new(len).unwrap()
            }
            fn alloc(&mut self, count: usize) -> usize {
                if count == 1 {
                    self.alloc_one().unwrap()
                } else {
                    self.alloc_run(count, 1).unwrap()
                }
            }
            fn free(&mut self, start: usize, count: usize) {
                self.free_run(start, count).unwrap()
            }
        }
    )*};
}

impl_tree!(OrTree, BinaryOrTree);

fn prepared<T: Tree>(len: usize) -> T {
    let mut tree = T::build(len);
    let half = len / 2;
    for _ in 0..half {
        tree.alloc(1);
    }
    let mut rng = SplitMix(7);
    for unit in 0..half {
        if rng.next().is_multiple_of(10) {
            tree.free(unit, 1);
        }
    }
    tree
}

/// Steady-state alloc/free pairs with run lengths from `run_len(i)`.
fn steady<T: Tree>(
    c: &mut Criterion,
    group: &str,
    name: &str,
    window: usize,
    run_len: fn(u64) -> usize,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    for (len, label) in SIZES {
        let mut tree: T = prepared(len);
        let mut live = VecDeque::with_capacity(window + 1);
        let mut i = 0u64;
        for _ in 0..window {
            let count = run_len(i);
            i += 1;
            live.push_back((tree.alloc(count), count));
        }
        g.bench_function(BenchmarkId::new(name, label), |b| {
            b.iter(|| {
                let count = run_len(i);
                i += 1;
                live.push_back((black_box(tree.alloc(count)), count));
                let (start, count) = live.pop_front().unwrap();
                tree.free(start, count);
            })
        });
    }
    g.finish();
}

fn single(_: u64) -> usize {
    1
}

/// Run lengths 1..=64 in a fixed scrambled order.
fn runs_1_64(i: u64) -> usize {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize + 1
}

fn bench_trees(c: &mut Criterion) {
    steady::<OrTree>(c, "single_unit", "ortree64", WINDOW, single);
    steady::<BinaryOrTree>(c, "single_unit", "binary", WINDOW, single);
    steady::<OrTree>(c, "runs_1_64", "ortree64", RUN_WINDOW, runs_1_64);
    steady::<BinaryOrTree>(c, "runs_1_64", "binary", RUN_WINDOW, runs_1_64);
}

/// Warptrees of 1..16 leaves through the pool, over arenas of 32 Ki and 16 Mi VABlocks.
fn bench_warptrees(c: &mut Criterion) {
    let mut g = c.benchmark_group("warptree");
    g.throughput(Throughput::Elements(1));
    for (len, label) in SIZES {
        let mut arena = OrTree::new(len).unwrap();
        let mut pool = PortionPool::new();
        let mut live = VecDeque::with_capacity(WINDOW + 1);
        let mut rng = SplitMix(11);
        for _ in 0..WINDOW {
            live.push_back(pool.alloc(&mut arena, (rng.next() % 5) as u32).unwrap());
        }
        g.bench_function(BenchmarkId::new("pool", label), |b| {
            b.iter(|| {
                let w = pool.alloc(&mut arena, (rng.next() % 5) as u32).unwrap();
                live.push_back(black_box(w));
                let old = live.pop_front().unwrap();
                pool.free(&mut arena, old.block, old.first_leaf).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_trees, bench_warptrees);
criterion_main!(benches);
