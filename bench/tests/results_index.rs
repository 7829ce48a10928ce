//! bench/results keeps what the docs cite: every folder there is listed in its README's index and
//! cited by the documentation, and every results folder the documentation names exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ is in the repository")
        .to_path_buf()
}

/// The folders under bench/results.
fn result_folders() -> BTreeSet<String> {
    std::fs::read_dir(repo().join("bench/results"))
        .expect("bench/results exists")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// README.md, CHANGELOG.md and docs/*.md, joined.
fn docs_text() -> String {
    let root = repo();
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("a doc reads"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names in `text` shaped like a results folder (`YYYY-MM-DD-...`), without what follows a
/// `/`; a name that goes on with `*` is a pattern and left out.
fn folder_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i + 11 <= bytes.len() {
        let date = &bytes[i..i + 11];
        let shaped = date[..4].iter().all(u8::is_ascii_digit)
            && date[4] == b'-'
            && date[5..7].iter().all(u8::is_ascii_digit)
            && date[7] == b'-'
            && date[8..10].iter().all(u8::is_ascii_digit)
            && date[10] == b'-';
        let starts = i == 0 || !is_name(bytes[i - 1]);
        if !(shaped && starts) {
            i += 1;
            continue;
        }
        let mut end = i + 11;
        while end < bytes.len() && is_name(bytes[end]) {
            end += 1;
        }
        let name = text[i..end].trim_end_matches('.');
        if bytes.get(end) != Some(&b'*') && name.len() > 11 {
            names.insert(name.to_string());
        }
        i = end;
    }
    names
}

#[test]
fn every_results_folder_is_indexed_and_cited() {
    let index = std::fs::read_to_string(repo().join("bench/results/README.md"))
        .expect("bench/results/README.md reads");
    let docs = docs_text();
    for folder in result_folders() {
        assert!(
            index.contains(&format!("`{folder}/`")),
            "bench/results/{folder}/ is not in bench/results/README.md's index"
        );
        assert!(
            docs.contains(&folder),
            "no doc cites bench/results/{folder}/: cite it or remove it"
        );
    }
}

#[test]
fn every_results_folder_the_docs_name_exists() {
    let folders = result_folders();
    let named = folder_names(&docs_text());
    let missing: Vec<&String> = named.iter().filter(|n| !folders.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the docs name results folders that are not in bench/results: {missing:?}"
    );
}

#[test]
fn folder_names_are_found_whole_and_patterns_left_out() {
    let names = folder_names(
        "see `bench/results/2026-11-22-h200/walk.json`, 2026-11-26-h*-host-resolver/ and \
         (2026-11-25-h100-mixed). On 2026-11-25 alone nothing.",
    );
    let want: BTreeSet<String> = ["2026-11-22-h200", "2026-11-25-h100-mixed"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, want);
}
