//! The committed `detail/abi.h` is what the Rust definitions render.

#[test]
fn the_committed_header_is_what_the_rust_definitions_render() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let path = format!("{root}/{}", headergen::PATH);
    let rendered = headergen::render();
    if std::env::var_os("ALIGNMALLOC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "{path} differs from the Rust definitions: run `ALIGNMALLOC_BLESS=1 cargo test -p \
         headergen` and commit the header"
    );
}
