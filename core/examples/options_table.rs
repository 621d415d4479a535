//! Prints a binding README's options table: `cargo run -p polylimit --example options_table -- go`
//! (`snake`, `camel` or `go`). `core/tests/readme_options.rs` checks the READMEs hold it.
//! `-- reference` prints the site's reference page, docs/reference/options.md
//! (checked by `core/tests/docs_reference.rs`).

use polylimit::options::{markdown_table, Naming};
use polylimit::reference::reference_page;

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_default();
    if arg == "reference" {
        print!("{}", reference_page());
        return;
    }
    match Naming::ALL.into_iter().find(|n| n.as_str() == arg) {
        Some(naming) => print!("{}", markdown_table(naming)),
        None => {
            eprintln!("usage: options_table snake|camel|go|reference");
            std::process::exit(2);
        }
    }
}
