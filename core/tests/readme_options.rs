//! Each binding's README lists the limiter options under that language's
//! names, exactly as the core's one list has them (`polylimit::options`).
//! A README out of step fails here with the table it should hold.

use std::path::Path;

use polylimit::options::{markdown_table, Naming};

const BEGIN: &str =
    "<!-- options table: generated from core/src/options.rs, checked by core/tests/readme_options.rs -->\n";
const END: &str = "<!-- end of options table -->";

#[test]
fn binding_readmes_hold_the_core_option_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stale = Vec::new();
    for (readme, naming) in [
        ("bindings-python/README.md", Naming::Snake),
        ("bindings-node/README.md", Naming::Camel),
        ("bindings-go/README.md", Naming::Go),
    ] {
        let text = std::fs::read_to_string(root.join(readme)).expect("a binding README");
        let want = format!("{BEGIN}{}{END}", markdown_table(naming));
        if !text.contains(&want) {
            stale.push(format!("{readme} should contain:\n{want}\n"));
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
