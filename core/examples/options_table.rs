//! Prints a binding README's options table: `cargo run -p polylimit --example options_table -- go`
//! (`snake`, `camel` or `go`). `core/tests/readme_options.rs` checks the READMEs hold it.

use polylimit::options::{markdown_table, Naming};

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_default();
    match Naming::ALL.into_iter().find(|n| n.as_str() == arg) {
        Some(naming) => print!("{}", markdown_table(naming)),
        None => {
            eprintln!("usage: options_table snake|camel|go");
            std::process::exit(2);
        }
    }
}
