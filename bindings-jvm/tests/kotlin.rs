//! The checked-in Kotlin (`src/main/kotlin/dev/polylimit/polylimit_jvm.kt`)
//! must be what uniffi-bindgen generates from the library cargo just built.
//! `POLYLIMIT_UPDATE_KOTLIN=1 cargo test -p polylimit-jvm --test kotlin`
//! (what `make jvm-kotlin` runs) rewrites it.
//!
//! One edit is made to uniffi's output ([`route_fast`]): the standard
//! `check`, `checkRequest`, `peek`, `peekRequest`, `reset`, `complete`,
//! `acquire` and the lease's `release`, and their suspend forms try the fast native calls (`FastCheck.kt`,
//! `FastRequest.kt`, `FastCalls.kt`) first and fall back to the generated
//! body, renamed `generatedCheck`, `generatedCheckAsync`, … which counts its
//! calls (`GeneratedCalls`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/libpolylimit_jvm.so`, built from the sources now: cargo
/// builds only the rlib for an integration test, so the cdylib could be
/// older than the sources.
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "-p", "polylimit-jvm"]);
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
    assert!(status.success(), "cargo build -p polylimit-jvm: {status}");
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
    let generated = route_fast(&std::fs::read_to_string(out.join(rel)).expect("generated Kotlin"));
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

/// `method`'s generated header (`…{`), a fast form of it (`… = fast ?:
/// generated…(args)`), and the generated body under the new name.
struct Route {
    header: &'static str,
    fast: &'static str,
    generated: &'static str,
}

const ROUTES: [Route; 15] = [
    Route {
        header: "@Throws(PolylimitException::class)override fun `check`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision {\n",
        fast: "@Throws(PolylimitException::class)override fun `check`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision =\n        fastDecision(`key`, `cost`, `nowMs`) ?: generatedCheck(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [check] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedCheck(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "    override suspend fun `checkAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision {\n",
        fast: "    override suspend fun `checkAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision =\n        fastDecisionAsync(`key`, `cost`, `nowMs`) ?: generatedCheckAsync(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [checkAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedCheckAsync(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `checkRequest`(`request`: HttpRequest): Outcome {\n",
        fast: "@Throws(PolylimitException::class)override fun `checkRequest`(`request`: HttpRequest): Outcome =\n        fastOutcome(`request`) ?: generatedCheckRequest(`request`)\n\n",
        generated: "    /** [checkRequest] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedCheckRequest(`request`: HttpRequest): Outcome {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `peek`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision {\n",
        fast: "@Throws(PolylimitException::class)override fun `peek`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision =\n        fastPeek(`key`, `cost`, `nowMs`) ?: generatedPeek(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [peek] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedPeek(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Decision {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "    override suspend fun `peekAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision {\n",
        fast: "    override suspend fun `peekAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision =\n        fastPeekAsync(`key`, `cost`, `nowMs`) ?: generatedPeekAsync(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [peekAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedPeekAsync(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Decision {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `peekRequest`(`request`: HttpRequest): Outcome {\n",
        fast: "@Throws(PolylimitException::class)override fun `peekRequest`(`request`: HttpRequest): Outcome =\n        fastPeekOutcome(`request`) ?: generatedPeekRequest(`request`)\n\n",
        generated: "    /** [peekRequest] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedPeekRequest(`request`: HttpRequest): Outcome {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "    override suspend fun `checkRequestAsync`(`request`: HttpRequest) : Outcome {\n",
        fast: "    override suspend fun `checkRequestAsync`(`request`: HttpRequest) : Outcome =\n        fastOutcomeAsync(`request`) ?: generatedCheckRequestAsync(`request`)\n\n",
        generated: "    /** [checkRequestAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedCheckRequestAsync(`request`: HttpRequest) : Outcome {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `reset`(`key`: kotlin.String)\n        = \n",
        fast: "@Throws(PolylimitException::class)override fun `reset`(`key`: kotlin.String) {\n        if (!fastReset(`key`)) generatedReset(`key`)\n    }\n\n",
        generated: "    /** [reset] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedReset(`key`: kotlin.String)\n        = GeneratedCalls.recorded() ?:\n",
    },
    Route {
        header: "    override suspend fun `resetAsync`(`key`: kotlin.String) {\n",
        fast: "    override suspend fun `resetAsync`(`key`: kotlin.String) {\n        if (!fastResetAsync(`key`)) generatedResetAsync(`key`)\n    }\n\n",
        generated: "    /** [resetAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedResetAsync(`key`: kotlin.String) {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `complete`(`token`: kotlin.String, `status`: kotlin.Int?)\n        = \n",
        fast: "@Throws(PolylimitException::class)override fun `complete`(`token`: kotlin.String, `status`: kotlin.Int?) {\n        if (!fastComplete(`token`, `status`)) generatedComplete(`token`, `status`)\n    }\n\n",
        generated: "    /** [complete] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedComplete(`token`: kotlin.String, `status`: kotlin.Int?)\n        = GeneratedCalls.recorded() ?:\n",
    },
    Route {
        header: "    override suspend fun `completeAsync`(`token`: kotlin.String, `status`: kotlin.Int?) {\n",
        fast: "    override suspend fun `completeAsync`(`token`: kotlin.String, `status`: kotlin.Int?) {\n        if (!fastCompleteAsync(`token`, `status`)) generatedCompleteAsync(`token`, `status`)\n    }\n\n",
        generated: "    /** [completeAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedCompleteAsync(`token`: kotlin.String, `status`: kotlin.Int?) {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `acquire`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Acquired {\n",
        fast: "@Throws(PolylimitException::class)override fun `acquire`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Acquired =\n        fastAcquire(`key`, `cost`, `nowMs`) ?: generatedAcquire(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [acquire] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedAcquire(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?): Acquired {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "    override suspend fun `acquireAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Acquired {\n",
        fast: "    override suspend fun `acquireAsync`(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Acquired =\n        fastAcquireAsync(`key`, `cost`, `nowMs`) ?: generatedAcquireAsync(`key`, `cost`, `nowMs`)\n\n",
        generated: "    /** [acquireAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedAcquireAsync(`key`: kotlin.String, `cost`: kotlin.Long?, `nowMs`: kotlin.Long?) : Acquired {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "@Throws(PolylimitException::class)override fun `release`(`nowMs`: kotlin.Long?): kotlin.Long {\n",
        fast: "@Throws(PolylimitException::class)override fun `release`(`nowMs`: kotlin.Long?): kotlin.Long =\n        fastRelease(`nowMs`) ?: generatedRelease(`nowMs`)\n\n",
        generated: "    /** [release] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)internal fun generatedRelease(`nowMs`: kotlin.Long?): kotlin.Long {\n        GeneratedCalls.record()\n",
    },
    Route {
        header: "    override suspend fun `releaseAsync`(`nowMs`: kotlin.Long?) : kotlin.Long {\n",
        fast: "    override suspend fun `releaseAsync`(`nowMs`: kotlin.Long?) : kotlin.Long =\n        fastReleaseAsync(`nowMs`) ?: generatedReleaseAsync(`nowMs`)\n\n",
        generated: "    /** [releaseAsync] through the uniffi-generated call (errors, and what the fast call cannot carry). */\n    @Throws(PolylimitException::class)\n    internal suspend fun generatedReleaseAsync(`nowMs`: kotlin.Long?) : kotlin.Long {\n        GeneratedCalls.record()\n",
    },
];

/// uniffi's Kotlin with the standard calls routed through the fast native
/// calls first (see the module's doc). Each header
/// must be found exactly once: a uniffi that writes them otherwise fails
/// here, never silently leaves the slow path in place.
fn route_fast(generated: &str) -> String {
    let mut text = generated.to_string();
    for r in &ROUTES {
        assert_eq!(
            text.matches(r.header).count(),
            1,
            "uniffi's Kotlin changed: cannot find the header to route through the fast path: {}",
            r.header
        );
        text = text.replacen(r.header, &format!("{}{}", r.fast, r.generated), 1);
    }
    text
}
