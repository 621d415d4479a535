//! The checked-in header must be what cbindgen generates from the sources.
//! `POLYLIMIT_UPDATE_HEADER=1 cargo test -p polylimit-capi --test header`
//! (what `make go-header` runs) rewrites it.

use std::path::PathBuf;

#[test]
fn header_is_up_to_date() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen cannot parse the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = crate_dir.join("include/polylimit.h");
    if std::env::var_os("POLYLIMIT_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: run `make go-header` (POLYLIMIT_UPDATE_HEADER=1 cargo test -p polylimit-capi --test header)",
        path.display()
    );
}
