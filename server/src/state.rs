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
