//! bench/results keeps what the docs cite: at most a hundred files, every one listed in its
//! README's index and cited by a doc or the code, and every result the docs and the code name
//! exists.

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

/// Paths in `text` that start with a results folder's name (`YYYY-MM-DD-...`), as far as they
/// go (`2026-11-22-h200/walk-rmat16.json`, or the folder alone); a name that goes on with `*` or
/// `{` is a pattern and left out.
fn result_paths(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || b"-_./".contains(&b);
    let mut paths = BTreeSet::new();
    let mut i = 0;
    while i + 11 <= bytes.len() {
        let date = &bytes[i..i + 11];
        let shaped = date[..4].iter().all(u8::is_ascii_digit)
            && date[4] == b'-'
            && date[5..7].iter().all(u8::is_ascii_digit)
            && date[7] == b'-'
            && date[8..10].iter().all(u8::is_ascii_digit)
            && date[10] == b'-';
        // After a `/` too: `bench/results/2026-...`.
        let starts = i == 0 || !is_name(bytes[i - 1]) || bytes[i - 1] == b'/';
        if !(shaped && starts) {
            i += 1;
            continue;
        }
        let mut end = i + 11;
        while end < bytes.len() && is_name(bytes[end]) {
            end += 1;
        }
        let path = text[i..end].trim_end_matches(['.', '/']);
        let pattern = matches!(bytes.get(end), Some(b'*' | b'{'));
        if !pattern && path.len() > 11 {
            paths.insert(path.to_string());
        }
        i = end;
    }
    paths
}

/// The folder a path from `result_paths` is in.
fn folder_of(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Every file under bench/results, as a path relative to it.
fn result_files() -> BTreeSet<String> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("a results folder reads") {
            let path = entry.expect("an entry reads").path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let rel = path.strip_prefix(base).expect("under bench/results");
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let base = repo().join("bench/results");
    let mut files = BTreeSet::new();
    walk(&base, &base, &mut files);
    files
}

/// `.ci/run` and every Rust source (outside bench/results, target and dot folders): the code that
/// may name a result.
fn code_text() -> String {
    let root = repo();
    let mut text = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run reads");
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a folder reads") {
            let path = entry.expect("an entry reads").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                let skip =
                    name.starts_with('.') || name == "target" || path.ends_with("bench/results");
                if !skip {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs")
                && !path.ends_with("results_index.rs")
            {
                text.push_str(&std::fs::read_to_string(&path).expect("a source reads"));
                text.push('\n');
            }
        }
    }
    text
}

/// At most this many files under bench/results: it keeps what the docs cite, no more.
const MOST_RESULT_FILES: usize = 100;

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
fn bench_results_is_small_and_every_file_is_in_the_index() {
    let files = result_files();
    assert!(
        files.len() <= MOST_RESULT_FILES,
        "bench/results holds {} files, more than {MOST_RESULT_FILES}: drop what no doc cites",
        files.len()
    );
    let index = std::fs::read_to_string(repo().join("bench/results/README.md"))
        .expect("bench/results/README.md reads");
    let listed = result_paths(&index);
    for file in files.iter().filter(|f| f.as_str() != "README.md") {
        assert!(
            listed.contains(file),
            "bench/results/{file} is not listed in bench/results/README.md: list it (and cite it) or remove it"
        );
    }
    for path in listed.iter().filter(|p| p.contains('/')) {
        assert!(
            files.contains(path),
            "bench/results/README.md lists {path}, which is not in bench/results"
        );
    }
}

#[test]
fn every_result_the_docs_and_code_name_exists() {
    let folders = result_folders();
    let files = result_files();
    let mut missing = Vec::new();
    for path in result_paths(&docs_text()).union(&result_paths(&code_text())) {
        let subfolder = format!("{path}/");
        let known = folders.contains(path)
            || files.contains(path)
            || files.iter().any(|f| f.starts_with(&subfolder));
        if !known {
            missing.push(path.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "the docs or the code name results that are not in bench/results: {missing:?}"
    );
}

#[test]
fn every_file_in_bench_results_is_cited_by_a_doc_or_the_code() {
    let text = docs_text() + &code_text();
    let cited = result_paths(&text);
    for file in result_files().iter().filter(|f| f.as_str() != "README.md") {
        let folder = folder_of(file);
        let name = file.rsplit('/').next().unwrap_or(file);
        let whole = cited.contains(file);
        // A doc or a script may name a folder once and then its files by name.
        let by_name = cited.iter().any(|c| folder_of(c) == folder) && text.contains(name);
        assert!(
            whole || by_name,
            "no doc or source cites bench/results/{file}: cite it or remove it"
        );
    }
}

#[test]
fn result_paths_are_found_whole_and_patterns_left_out() {
    let names = result_paths(
        "see `bench/results/2026-11-22-h200/walk.json`, 2026-11-26-h*-host-resolver/ and \
         (2026-11-25-h100-mixed). `2026-11-26-run-class/h100/`, 2026-11-22-h200/walk-rmat{16,18}.json \
         On 2026-11-25 alone nothing.",
    );
    let want: BTreeSet<String> = [
        "2026-11-22-h200/walk.json",
        "2026-11-25-h100-mixed",
        "2026-11-26-run-class/h100",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(names, want);
    assert_eq!(
        folder_of("2026-11-26-run-class/h100/x.json"),
        "2026-11-26-run-class"
    );
}
