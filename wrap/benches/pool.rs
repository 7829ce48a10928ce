//! What the pool costs per managed allocation and free of a wrapped program (host only: the
//! driver's reservation is a stand-in that hands out address ranges): 50 000 allocations of 16 B
//! to 1 KiB, as the small-allocation test program makes, then their frees.

use criterion::{Criterion, criterion_group, criterion_main};
use wrap::{Pool, PoolAlloc, Reserve, WrapOptions};

struct Addresses(u64);

impl Reserve for Addresses {
    fn reserve(&mut self, bytes: u64) -> Result<u64, i32> {
        let base = self.0;
        self.0 += bytes + (2 << 20);
        Ok(base)
    }
    fn gpu_free_bytes(&mut self) -> Option<u64> {
        Some(1 << 40)
    }
}

fn pool(c: &mut Criterion) {
    const N: u64 = 50_000;
    let mut group = c.benchmark_group("pool");
    group.throughput(criterion::Throughput::Elements(N));
    group.bench_function("alloc_then_free_50k_small", |b| {
        b.iter(|| {
            let mut pool = Pool::new(&WrapOptions::default(), Addresses(1 << 40));
            let mut live = Vec::with_capacity(N as usize);
            for i in 0..N {
                match pool.alloc(16 + (i * 7919) % 1008, i, None) {
                    PoolAlloc::Arena(a) => live.push(a),
                    other => panic!("{other:?}"),
                }
            }
            for (i, a) in live.into_iter().enumerate() {
                assert_eq!(pool.free(a, N + i as u64), wrap::pool::PoolFree::Freed);
            }
            pool
        })
    });
    group.finish();
}

criterion_group!(benches, pool);
criterion_main!(benches);
