//! docs/usage.md shows the example that is compiled (and run by CI), as it is.

#[test]
fn the_usage_guide_shows_the_example_that_is_compiled() {
    let guide = include_str!("../../docs/usage.md");
    for (name, text) in [
        ("quickstart.rs", include_str!("../examples/quickstart.rs")),
        ("quickstart.cu", include_str!("../examples/quickstart.cu")),
    ] {
        assert!(
            guide.contains(text),
            "docs/usage.md does not show alignmalloc/examples/{name} as it is"
        );
    }
}
