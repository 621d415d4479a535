//! The limiter the server decides with, built once from the rules file and
//! reloaded in place ([`Limiter::reload`]): a reload swaps its policies and
//! rules at once, a call in flight finishes on the rules it started with,
//! and the state (the memory store's counters included), the breaker and
//! the metrics carry over.

use std::path::{Path, PathBuf};

use polylimit::Limiter;

/// The rules file and the limiter built from it.
pub struct State {
    path: PathBuf,
    limiter: Limiter,
}

impl State {
    /// Builds the limiter from the rules file at `path`.
    pub fn load(path: impl AsRef<Path>) -> polylimit::Result<State> {
        let path = path.as_ref().to_path_buf();
        let limiter = Limiter::from_file(&path)?;
        Ok(State { path, limiter })
    }

    /// The limiter to decide the next call with.
    pub fn current(&self) -> &Limiter {
        &self.limiter
    }

    /// Reads the rules file again into the limiter; a bad file (or one that
    /// changes a setting that needs a restart, such as `store`) keeps the
    /// rules in force and returns the core's error naming the field. The
    /// core counts it in `polylimit_config_reloads_total{result}`.
    pub async fn reload(&self) -> polylimit::Result<()> {
        self.limiter.reload().await
    }

    /// The rules file the server was started with.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polylimit::CheckOptions;

    #[tokio::test]
    async fn a_reload_keeps_the_state_and_a_bad_file_keeps_the_rules() {
        let path = std::env::temp_dir().join(format!("polylimit-state-{}.yaml", std::process::id()));
        let rules =
            |rate: &str| format!("store: memory\npolicies:\n  p: {{ algorithm: fixed_window, rate: {rate} }}\n");
        let rate = |state: &State| state.current().policies().next().map(|p| p.count());
        let at = CheckOptions {
            cost: 1,
            now_ms: Some(1_700_000_040_000),
        };
        std::fs::write(&path, rules("3/min")).unwrap();
        let state = State::load(&path).unwrap();
        for _ in 0..3 {
            assert!(state.current().check_with("k", at).await.unwrap().allowed);
        }
        std::fs::write(&path, rules("5/min")).unwrap();
        state.reload().await.unwrap();
        assert_eq!(rate(&state), Some(5));
        // The memory store's counter carried over: 3 of the 5 are spent.
        let next = state.current().check_with("k", at).await.unwrap();
        assert_eq!((next.allowed, next.remaining), (true, 1));
        std::fs::write(&path, rules("often")).unwrap();
        let err = state.reload().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "policies.p.rate: \"often\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(rate(&state), Some(5));
        let text = state.current().metrics_text();
        for counted in [
            "polylimit_config_reloads_total{result=\"error\"} 1\n",
            "polylimit_config_reloads_total{result=\"ok\"} 1\n",
        ] {
            assert!(text.contains(counted), "{text}");
        }
        let _ = std::fs::remove_file(&path);
    }
}
