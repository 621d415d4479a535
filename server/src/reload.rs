//! SIGHUP: reload the limiter from the rules file ([`State::reload`]). A bad
//! file keeps the rules in force and logs the core's error naming the field;
//! calls in flight finish on the rules they started with. The core counts
//! every reload in `polylimit_config_reloads_total{result}`.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};

use crate::log;
use crate::state::State;

/// Reloads `state` on every SIGHUP, for the life of the process.
pub fn on_hangup(state: Arc<State>) {
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => return log::warn("no SIGHUP handler: reload is off", &[("error", e.to_string().into())]),
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            reload(&state).await;
        }
    });
}

async fn reload(state: &State) {
    let path = state.path().display().to_string();
    match state.reload().await {
        Ok(()) => {
            log::info("rules reloaded", &[("path", path.into())]);
        }
        Err(e) => {
            log::error(
                "rules reload failed, the previous rules stay in force",
                &[("path", path.into()), ("error", e.to_string().into())],
            );
        }
    }
}
