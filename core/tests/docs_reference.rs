//! The documentation site's reference of every option and policy field
//! (docs/reference/options.md) is generated from the core's lists
//! (`polylimit::reference`). A stale page fails here; regenerate it with
//! `cargo run -p polylimit --example options_table -- reference > docs/reference/options.md`.

use std::path::Path;

use polylimit::reference::reference_page;

#[test]
fn the_reference_page_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/options.md");
    let page = std::fs::read_to_string(&path).expect("docs/reference/options.md");
    assert!(
        page == reference_page(),
        "docs/reference/options.md is stale: run `cargo run -p polylimit --example options_table -- reference > docs/reference/options.md`"
    );
}
