//! Reload: new rules for a running limiter, swapped whole.
//!
//! A reload reads what the limiter was built from again (its rules file, its
//! options with `${NAME}` expanded anew) and builds an engine of the new
//! policies on the limiter's own store connection, local fallback, breaker,
//! metrics, alert sinks and background work
//! ([`Engine::reloaded`](crate::engine::Engine)). The new engine and rules
//! replace the old pair in one step: a call takes the pair in force when it
//! starts and finishes on it, and a completion token completes on the pair
//! that gave it out.
//!
//! State is kept for every policy whose state keys did not change: those
//! spell the policy's algorithm, name and the numbers its state is measured
//! in (`store::keys`), so a policy whose algorithm, window or (for GCRA and
//! the shaping leaky bucket) count changed starts afresh, and one whose
//! burst, penalty or fallback changed keeps its state. Per-key overrides,
//! penalty and adaptive records are kept whatever changed.
//!
//! A reload fails, keeping the old rules, on a file or option that does not
//! build (the error names the field), and on a setting that needs a restart
//! (`store`, `prefix`, `regions`, `tls_ca`, `overrides`, `max_keys`,
//! `block_cache`, timeouts, breaker, `anomaly_log`). Every reload is counted
//! in `polylimit_config_reloads_total{result="ok"|"error"}`; a failed one also
//! writes one JSON line to stderr saying why.
//!
//! `watch` (a rules-file limiter's option) polls the file's modification
//! time, size and content hash and reloads when they change, until the
//! limiter is closed or dropped.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Limiter, Live};
use crate::engine::LimiterConfig;
use crate::error::{Error, Result};
use crate::options::Naming;

/// What a limiter was built from, read again by a reload.
pub(super) enum Source {
    /// A binding's options object (a rules file, rules text, a policy).
    Options(Naming, Value),
    /// A parsed rules document (its variables already expanded).
    Document(Value),
    /// A configuration built in Rust (no HTTP rules).
    Config(LimiterConfig),
}

impl Limiter {
    /// Reloads the limiter's configuration: reads its rules file (or options)
    /// again, `${NAME}` expanded from the environment anew, and swaps the
    /// policies and rules at once (see the module). A call in flight
    /// finishes on the rules it started with. On an error (naming the
    /// field) the old rules keep serving.
    pub async fn reload(&self) -> Result<()> {
        self.reload_blocking()
    }

    /// [`Limiter::reload`], for a caller without a runtime (it reads a file
    /// and builds; nothing waits on the store).
    pub fn reload_blocking(&self) -> Result<()> {
        self.swap(None)
    }

    /// Reloads from other options, in `naming` (a binding's options object,
    /// as [`Limiter::build`] takes it): later reloads read these. The same
    /// rules as [`Limiter::reload`] apply (settings that need a restart
    /// must not change).
    pub async fn reload_from(&self, naming: Naming, options: &Value) -> Result<()> {
        self.reload_from_blocking(naming, options)
    }

    /// [`Limiter::reload_from`], for a caller without a runtime.
    pub fn reload_from_blocking(&self, naming: Naming, options: &Value) -> Result<()> {
        self.swap(Some(Source::Options(naming, options.clone())))
    }

    /// How many reloads (a call or `watch`) have swapped rules in: 0 for the
    /// rules the limiter was built with. A binding that remembers an answer
    /// about the rules (which headers they read, say) asks again when this
    /// moves.
    pub fn rules_generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Builds the new pair from `source` (`None`: the one the limiter was
    /// built from) and swaps it in; counts and logs the result.
    fn swap(&self, source: Option<Source>) -> Result<()> {
        let _one = self.shared.reloading.lock();
        let current = self.live();
        current.engine.check_open()?;
        let registry = current.engine.metrics_registry();
        registry.set_reloadable();
        let built = {
            let kept = self.shared.source.lock();
            build(source.as_ref().unwrap_or(&kept), &current)
        };
        match built {
            Ok(live) => {
                // Counted under the lock: a reader that sees the new pair sees its generation.
                let mut pair = self.shared.live.write();
                *pair = live;
                self.shared.generation.fetch_add(1, Ordering::Release);
                drop(pair);
                if let Some(source) = source {
                    *self.shared.source.lock() = source;
                }
                registry.reload(true);
                Ok(())
            }
            Err(e) => {
                registry.reload(false);
                log_failure(&e);
                Err(e)
            }
        }
    }
}

/// The engine and rules of `source`, on `current`'s store and state.
fn build(source: &Source, current: &Live) -> Result<Live> {
    let (config, rules) = match source {
        Source::Options(naming, options) => {
            let (config, rules) = crate::config::resolve(*naming, options)?;
            (config, Some(rules))
        }
        Source::Document(document) => {
            let (config, rules) = crate::config::resolve_document(document)?;
            (config, Some(rules))
        }
        Source::Config(config) => (config.clone(), None),
    };
    let engine = current.engine.reloaded(config)?;
    Ok(Live {
        engine,
        http: current.http.with_rules(rules),
    })
}

/// One JSON line on stderr for a failed reload, like the alerts' lines.
fn log_failure(error: &Error) {
    let field = match error {
        Error::Config { field, .. } => Value::String(field.clone()),
        _ => Value::Null,
    };
    let line = serde_json::json!({
        "event": "polylimit.config_reload",
        "result": "error",
        "field": field,
        "error": error.to_string(),
        "at_ms": crate::engine::process_now_ms(),
    });
    use std::io::Write;
    // Not eprintln!, which panics when stderr cannot take the line.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// What a poll of the watched file saw: modification time, size, content hash.
type Seen = Option<(Option<std::time::SystemTime>, u64, [u8; 32])>;

fn look(path: &PathBuf) -> Seen {
    let meta = std::fs::metadata(path).ok()?;
    let text = std::fs::read(path).ok()?;
    Some((meta.modified().ok(), meta.len(), Sha256::digest(&text).into()))
}

/// Starts polling `path` every `interval` for `limiter`, reloading it when the
/// file changes; stops once the limiter is closed or dropped. On the tokio
/// runtime the caller runs on, or else on a thread of its own.
pub(super) fn watch(limiter: &Limiter, path: PathBuf, interval: Duration) {
    let weak = Arc::downgrade(&limiter.shared);
    let mut seen = look(&path);
    // One poll: false once the limiter is gone or closed.
    let mut poll = move || -> bool {
        let Some(shared) = Weak::upgrade(&weak) else {
            return false;
        };
        let limiter = Limiter { shared };
        if limiter.is_closed() {
            return false;
        }
        let now = look(&path);
        if now != seen {
            seen = now;
            // A failure is counted and logged by the reload; the old rules stay.
            let _ = limiter.reload_blocking();
        }
        true
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                if !poll() {
                    return;
                }
            }
        });
        return;
    }
    let _ = std::thread::Builder::new()
        .name("polylimit-watch".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            if !poll() {
                return;
            }
        });
}
