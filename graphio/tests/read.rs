//! Reading graph files: both formats, gzip, ids compacted as a model says, and every malformed
//! input an error naming its line.

use std::io::Write;

use graphio::{EdgeList, Error, Format, Symmetry};
use proptest::prelude::*;

fn read(text: &str, format: Format) -> Result<EdgeList, Error> {
    graphio::read(text.as_bytes(), text.len() as u64, "g", format, |_, _| {})
}

fn gzip(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

fn originals(g: &EdgeList) -> Vec<(u64, u64)> {
    g.edges
        .iter()
        .map(|&(u, v)| (g.ids.original(u), g.ids.original(v)))
        .collect()
}

#[test]
fn snap_lines_comments_blanks_columns_and_crlf() {
    let g = read(
        "# a comment\n% another\n\n0 1\r\n1\t2 extra 7\n  2 2\n3 0",
        Format::Snap,
    )
    .unwrap();
    assert_eq!(g.edges, vec![(0, 1), (1, 2), (2, 2), (3, 0)]);
    assert_eq!(g.vertices, 4);
    assert!(!g.ids.is_compacted());
    assert_eq!(g.stats.lines, 7);
    assert_eq!(g.stats.edges_read, 4);
    assert_eq!(g.stats.self_loops, 1);
    assert_eq!(g.stats.isolated, 0);
    assert_eq!(g.symmetry, None);
}

#[test]
fn sparse_ids_are_compacted_in_their_order_and_mapped_back() {
    let g = read("1 4294967295\n", Format::Snap).unwrap();
    assert_eq!(g.vertices, 2);
    assert_eq!(g.edges, vec![(0, 1)]);
    assert!(g.ids.is_compacted());
    assert_eq!(originals(&g), vec![(1, 4294967295)]);
    let g = read("200000000 1\n7 200000000\n", Format::Snap).unwrap();
    assert_eq!((g.vertices, g.edges.clone()), (3, vec![(2, 0), (1, 2)]));
    let g = read("18446744073709551615 0\n", Format::Snap).unwrap();
    assert_eq!(originals(&g), vec![(u64::MAX, 0)]);
    assert_eq!(g.stats.largest_id, u64::MAX);
}

#[test]
fn malformed_snap_lines_are_named() {
    for (text, line, says) in [
        ("0 1\n5\n", 2, "expected two vertex ids"),
        ("0 1\n\na b\n", 3, "\"a\""),
        ("1 -2\n", 1, "\"-2\""),
        ("1 2x\n", 1, "expected two vertex ids"),
        ("1 18446744073709551616\n", 1, "too large"),
        ("1 99999999999999999999999\n", 1, "too large"),
    ] {
        match read(text, Format::Snap) {
            Err(Error::Line { line: l, what, .. }) => {
                assert_eq!(l, line, "{text:?}");
                assert!(what.contains(says), "{text:?}: {what}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    let e = read("# only comments\n", Format::Snap).unwrap_err();
    assert_eq!(e.to_string(), "g: no edges");
}

#[test]
fn matrix_market_general_symmetric_and_a_huge_declared_size() {
    let g = read(
        "%%MatrixMarket matrix coordinate real general\n% c\n3 3 2\n1 2 0.5\n3 1 1\n",
        Format::MatrixMarket,
    )
    .unwrap();
    assert_eq!(g.symmetry, Some(Symmetry::General));
    assert_eq!(g.edges, vec![(0, 1), (2, 0)]);
    assert_eq!(originals(&g), vec![(1, 2), (3, 1)]);
    let g = read(
        "%%MatrixMarket matrix coordinate pattern symmetric\n4000000000 4000000000 2\n1 3999999999\n7 1\n",
        Format::MatrixMarket,
    )
    .unwrap();
    assert_eq!(g.symmetry, Some(Symmetry::Symmetric));
    assert_eq!(g.vertices, 3);
    assert_eq!(g.stats.declared_vertices, 4_000_000_000);
    assert_eq!(g.stats.isolated, 4_000_000_000 - 3);
    assert_eq!(originals(&g), vec![(1, 3999999999), (7, 1)]);
}

#[test]
fn malformed_matrix_market_files_are_named() {
    let mm = |body: &str| format!("%%MatrixMarket matrix coordinate real general\n{body}");
    let cases = [
        (
            "%%MatrixMarket matrix array real general\n2 2\n".to_string(),
            "g:1: array matrices are not graphs",
        ),
        ("0 1\n".to_string(), "g:1: not a Matrix Market file"),
        (
            "%%MatrixMarket matrix coordinate real odd\n".to_string(),
            "g:1: unknown symmetry",
        ),
        (mm("2 2\n"), "g:2: expected \"rows columns entries\""),
        (
            mm("2 2 1\n3 1\n"),
            "g:3: entry (3, 1) outside the 2 x 2 matrix",
        ),
        (mm("2 2 1\n0 1\n"), "g:3: entry (0, 1) outside"),
        (mm("2 2 1\n1 1\n2 2\n"), "g:4: more entries than the 1"),
        (
            mm("2 2 2\n1 1\n"),
            "g: 1 entries, the size line announced 2",
        ),
        (mm(""), "g: no size line"),
        (String::new(), "g: empty file"),
    ];
    for (text, says) in cases {
        let e = read(&text, Format::MatrixMarket).unwrap_err().to_string();
        assert!(e.starts_with(says), "{text:?}: {e}");
    }
}

#[test]
fn gzip_is_read_by_content_with_progress_to_the_end() {
    let text: String = (0..300_000u64)
        .map(|i| format!("{} {}\n", i * 3, (i * 7919) % 900_000))
        .collect();
    let plain = read(&text, Format::Snap).unwrap();
    let packed = gzip(&text);
    let mut last = (0, 0);
    let g = graphio::read(
        &packed[..],
        packed.len() as u64,
        "g.gz",
        Format::Snap,
        |r, t| last = (r, t),
    )
    .unwrap();
    assert_eq!(g.edges, plain.edges);
    assert_eq!(originals(&g), originals(&plain));
    assert_eq!(last, (packed.len() as u64, packed.len() as u64));
    assert_eq!(g.stats.text_bytes, text.len() as u64);
    // Lines cross the parser's 1 MiB blocks: every edge is still read.
    assert_eq!(g.stats.edges_read, 300_000);
    assert_eq!(g.edges.len(), 300_000);
}

#[test]
fn a_file_on_disk_and_a_missing_one() {
    let dir = std::env::temp_dir().join(format!("graphio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("g.txt.gz");
    std::fs::write(&path, gzip("5 6\n6 7\n")).unwrap();
    let g = graphio::read_file(&path, Format::Snap, |_, _| {}).unwrap();
    assert_eq!(originals(&g), vec![(5, 6), (6, 7)]);
    let e = graphio::read_file(&dir.join("none"), Format::Snap, |_, _| {}).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

proptest! {
    /// Against a model: dense ids are the ranks of the ids in use, in order, and map back.
    #[test]
    fn compaction_keeps_every_edge_and_the_order_of_ids(
        edges in prop::collection::vec((0u64..40, 0u64..40), 1..200),
        scale in prop_oneof![Just(1u64), Just(1000), Just(1 << 40)],
    ) {
        let text: String = edges.iter().map(|(u, v)| format!("{} {}\n", u * scale, v * scale)).collect();
        let g = read(&text, Format::Snap).unwrap();
        let mut used: Vec<u64> = edges.iter().flat_map(|&(u, v)| [u * scale, v * scale]).collect();
        used.sort_unstable();
        used.dedup();
        prop_assert_eq!(g.vertices as usize, used.len());
        for (&(u, v), &(du, dv)) in edges.iter().zip(&g.edges) {
            prop_assert_eq!(used[du as usize], u * scale);
            prop_assert_eq!(used[dv as usize], v * scale);
        }
        for d in 0..g.vertices {
            prop_assert_eq!(g.ids.original(d), used[d as usize]);
        }
    }
}

#[test]
fn update_files_give_batches_in_file_order_with_their_lines() {
    let text = "# round 1\n+ 1 2\n- 3 4\r\n=\n\n% round 2\n  +\t5 6  \n-  7 8\n";
    let u = graphio::read_updates(text.as_bytes(), "u").unwrap();
    let got: Vec<Vec<(bool, u64, u64, u64)>> = u
        .batches
        .iter()
        .map(|b| b.iter().map(|x| (x.insert, x.from, x.to, x.line)).collect())
        .collect();
    assert_eq!(
        got,
        vec![
            vec![(true, 1, 2, 2), (false, 3, 4, 3)],
            vec![(true, 5, 6, 7), (false, 7, 8, 8)]
        ]
    );
    // A trailing "=" ends the last batch; gzip reads the same.
    let closed = graphio::read_updates(gzip("+ 1 2\n=\n").as_slice(), "u").unwrap();
    assert_eq!(closed.batches.len(), 1);
}

#[test]
fn malformed_update_files_name_the_line() {
    for (text, says) in [
        ("+ 1 2\n* 3 4\n", "u:2: expected \"+ U V\" (insert)"),
        ("+ 1\n", "u:1: expected \"+ U V\""),
        ("- 1 2 3\n", "u:1: expected \"- U V\""),
        ("+1 2\n", "u:1: expected \"+ U V\" (insert), \"- U V\""),
        ("+ 1 -2\n", "u:1: expected \"+ U V\""),
        (
            "+ 1 18446744073709551616\n",
            "u:1: expected \"+ U V\" (two vertex ids below 2^64)",
        ),
        ("+ 1 2\n=\n=\n", "u:3: \"=\" ends a batch with no updates"),
        ("=\n+ 1 2\n", "u:1: \"=\" ends a batch"),
        ("== \n", "u:1: expected"),
        ("# nothing\n", "u: no updates"),
        ("", "u: no updates"),
    ] {
        let e = graphio::read_updates(text.as_bytes(), "u")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(says), "{text:?}: {e}");
    }
}

#[test]
fn dense_ids_map_back_to_the_files() {
    let g = read("10 30\n30 20\n", Format::Snap).unwrap();
    assert_eq!(g.ids.dense(10), Some(0));
    assert_eq!(g.ids.dense(20), Some(1));
    assert_eq!(g.ids.dense(30), Some(2));
    assert_eq!(g.ids.dense(25), None);
    let g = read("0 1\n2 1\n", Format::Snap).unwrap();
    assert_eq!((g.ids.dense(2), g.ids.dense(3)), (Some(2), None));
    let g = read(
        "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n3 1\n",
        Format::MatrixMarket,
    )
    .unwrap();
    assert_eq!(
        (
            g.ids.dense(0),
            g.ids.dense(1),
            g.ids.dense(3),
            g.ids.dense(4)
        ),
        (None, Some(0), Some(2), None)
    );
}
