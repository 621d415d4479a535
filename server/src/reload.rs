//! SIGHUP: rebuild the limiter from the rules file. A bad file keeps the
//! rules in force and logs the core's error naming the field; calls in
//! flight finish on the limiter they started with (see `state`).

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};

use crate::state::State;
use crate::{log, ops};

/// Reloads `state` on every SIGHUP, for the life of the process.
pub fn on_hangup(state: Arc<State>) {
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => return log::warn("no SIGHUP handler: reload is off", &[("error", e.to_string().into())]),
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            reload(&state);
        }
    });
}

fn reload(state: &State) {
    let path = state.path().display().to_string();
    match state.reload(state.path()) {
        Ok(()) => {
            ops::count_reload(true);
            log::info("rules reloaded", &[("path", path.into())]);
        }
        Err(e) => {
            ops::count_reload(false);
            log::error(
                "rules reload failed, the previous rules stay in force",
                &[("path", path.into()), ("error", e.to_string().into())],
            );
        }
    }
}
