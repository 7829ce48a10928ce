//! How fast an edge list is read: a 64 MB SNAP text with sparse ids (up to 2^30, compacted by
//! sorting) and with dense ids (0..2^20, compacted by a table), parsed from memory, and the
//! sparse one gzip-compressed.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::io::Write;

fn edge_list(spread: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(70 << 20);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while out.len() < 64 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (u, v) = (x % (1 << 20) * spread, (x >> 32) % (1 << 20) * spread);
        writeln!(out, "{u}\t{v}").unwrap();
    }
    out
}

fn parse(c: &mut Criterion) {
    let text = edge_list(1021);
    let dense = edge_list(1);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let mut group = c.benchmark_group("read");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(text.len() as u64));
    for (name, input) in [
        ("snap_64MB", &text),
        ("snap_64MB_dense_ids", &dense),
        ("snap_64MB_gzip", &gz),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                graphio::read(
                    &input[..],
                    input.len() as u64,
                    "bench",
                    graphio::Format::Snap,
                    |_, _| {},
                )
                .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
