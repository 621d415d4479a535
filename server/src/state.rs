//! The limiter the server decides with, swapped whole on reload: a call
//! takes the current `Arc<Limiter>` once and keeps it to its end, so a
//! reload never changes the rules under a call in flight.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use polylimit::Limiter;

/// The rules file and the limiter built from it.
pub struct State {
    path: PathBuf,
    limiter: RwLock<Arc<Limiter>>,
}

impl State {
    /// Builds the limiter from the rules file at `path`.
    pub fn load(path: impl AsRef<Path>) -> polylimit::Result<State> {
        let path = path.as_ref().to_path_buf();
        let limiter = Limiter::from_file(&path)?;
        Ok(State {
            path,
            limiter: RwLock::new(Arc::new(limiter)),
        })
    }

    /// The limiter to decide the next call with.
    pub fn current(&self) -> Arc<Limiter> {
        // A poisoned lock still holds a whole Arc: the swap is one store.
        self.limiter.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Rebuilds the limiter from the rules file at `path` (the server's own:
    /// [`State::path`]); a bad file leaves the old limiter in place and
    /// returns the core's error naming the field.
    pub fn reload(&self, path: impl AsRef<Path>) -> polylimit::Result<()> {
        let fresh = Arc::new(Limiter::from_file(path)?);
        *self.limiter.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// The rules file the server was started with.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_on_reload_keeps_the_old_limiter() {
        let path = std::env::temp_dir().join(format!("polylimit-state-{}.yaml", std::process::id()));
        let rules =
            |rate: &str| format!("store: memory\npolicies:\n  p: {{ algorithm: fixed_window, rate: {rate} }}\n");
        let rate = |state: &State| state.current().policies().next().map(|p| p.count());
        std::fs::write(&path, rules("3/min")).unwrap();
        let state = State::load(&path).unwrap();
        let before = state.current();
        std::fs::write(&path, rules("5/min")).unwrap();
        state.reload(state.path()).unwrap();
        assert_eq!(rate(&state), Some(5));
        // A call that took the limiter before keeps it.
        assert_eq!(before.policies().next().map(|p| p.count()), Some(3));
        std::fs::write(&path, rules("often")).unwrap();
        let err = state.reload(state.path()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policies.p.rate: \"often\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(rate(&state), Some(5));
        let _ = std::fs::remove_file(&path);
    }
}
