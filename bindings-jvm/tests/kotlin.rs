//! The checked-in Kotlin (`src/main/kotlin/dev/polylimit/polylimit_jvm.kt`)
//! must be what uniffi-bindgen generates from the library cargo just built.
//! `POLYLIMIT_UPDATE_KOTLIN=1 cargo test -p polylimit-jvm --test kotlin`
//! (what `make jvm-kotlin` runs) rewrites it.
//!
//! It is uniffi's output, untouched: the public `Limiter` is the
//! hand-written facade `Limiter.kt` over the generated `NativeLimiter`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/libpolylimit_jvm.so`, built from the sources now: cargo
/// builds only the rlib for an integration test, so the cdylib could be
/// older than the sources.
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let mut build = Command::new(env!("CARGO"));
    // The units of `cargo test --workspace` (Fresh after `make test`'s
    // rust-build): `-p polylimit-jvm` alone resolved other features and
    // compiled the core and 53 more units once more.
    build.args(["build", "--quiet", "--workspace", "--test", "kotlin"]);
    // The environment cargo gives a test (its library path, this package's
    // variables) would make build scripts and units look changed: a rebuild
    // here and another in the next plain `cargo build`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name == "LD_LIBRARY_PATH"
            || (name.starts_with("CARGO_") && name != "CARGO_HOME" && name != "CARGO_TARGET_DIR")
            || name.starts_with("RUST_TEST")
            || name == "OUT_DIR"
        {
            build.env_remove(name.as_ref());
        }
    }
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "cargo build --workspace --test kotlin: {status}");
    let lib = profile_dir.join(format!(
        "{}polylimit_jvm{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

#[test]
fn kotlin_is_up_to_date() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("polylimit-jvm-kotlin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new(env!("CARGO_BIN_EXE_uniffi-bindgen"))
        .args(["generate", "--no-format", "--language", "kotlin", "--library"])
        .arg(cdylib())
        .arg("--out-dir")
        .arg(&out)
        .current_dir(&crate_dir)
        .status()
        .expect("run uniffi-bindgen");
    assert!(status.success(), "uniffi-bindgen failed: {status}");
    let rel = Path::new("dev/polylimit/polylimit_jvm.kt");
    let generated = std::fs::read_to_string(out.join(rel)).expect("generated Kotlin");
    let _ = std::fs::remove_dir_all(&out);
    let path = crate_dir.join("src/main/kotlin").join(rel);
    if std::env::var_os("POLYLIMIT_UPDATE_KOTLIN").is_some() {
        std::fs::write(&path, &generated).expect("write the Kotlin");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: run `make jvm-kotlin` (POLYLIMIT_UPDATE_KOTLIN=1 cargo test -p polylimit-jvm --test kotlin)",
        path.display()
    );
}
