//! polylimit-server: Envoy's rate-limit service (gRPC) and an HTTP check
//! endpoint for nginx, Traefik and Caddy, deciding with the polylimit core
//! from the libraries' own rules file.

mod check;
mod cli;
mod descriptor;
mod grpc;
mod http;
mod log;
mod ops;
mod proto;
mod reload;
mod reply;
mod shutdown;
mod state;

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use cli::{Command, Config};
use state::State;

fn main() -> ExitCode {
    let config = match cli::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("polylimit-server: {e}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    // A panic is one JSON log line too (a call's answers INTERNAL: grpc::guarded).
    std::panic::set_hook(Box::new(|info| {
        log::error("panic", &[("error", info.to_string().into())])
    }));
    let runtime = match polylimit::build_runtime(None) {
        Ok(rt) => rt,
        Err(e) => {
            log::error("cannot start the runtime", &[("error", e.to_string().into())]);
            return ExitCode::FAILURE;
        }
    };
    if config.check {
        return runtime.block_on(check(&config.rules));
    }
    runtime.block_on(run(config))
}

/// `--check`: builds the limiter from the rules file, prints `ok` or the
/// core's error naming the field.
async fn check(rules: &str) -> ExitCode {
    match polylimit::Limiter::from_file(rules) {
        Ok(_) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{rules}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> ExitCode {
    let state = match State::load(&config.rules) {
        Ok(state) => Arc::new(state),
        Err(e) => {
            log::error(
                "bad rules file",
                &[("path", config.rules.clone().into()), ("error", e.to_string().into())],
            );
            return ExitCode::FAILURE;
        }
    };
    let (grpc_listener, http_listener) = match (bind(config.grpc).await, bind(config.http).await) {
        (Ok(g), Ok(h)) => (g, h),
        (Err(e), _) | (_, Err(e)) => {
            log::error("cannot listen", &[("error", e.into())]);
            return ExitCode::FAILURE;
        }
    };
    // The signal handlers before the listening line: a supervisor (or a test)
    // may signal as soon as it reads it, and the default action of SIGHUP and
    // SIGTERM is to kill the process.
    reload::on_hangup(state.clone());
    let shutdown = shutdown_signal();
    let addr = |l: &TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    log::info(
        "listening",
        &[
            ("grpc", addr(&grpc_listener).into()),
            ("http", addr(&http_listener).into()),
        ],
    );
    let (stop, stopped) = watch::channel(false);
    let grpc = tokio::spawn(grpc::serve(
        grpc_listener,
        state.clone(),
        config.domain,
        config.trust_client_clock,
        stopped.clone(),
    ));
    let http = tokio::spawn(http::serve(http_listener, state, config.trust_client_clock, stopped));
    shutdown.await;
    log::info("shutting down", &[]);
    let _ = stop.send(true);
    let mut code = ExitCode::SUCCESS;
    if let Err(e) = grpc
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        log::error("grpc server failed", &[("error", e.into())]);
        code = ExitCode::FAILURE;
    }
    if let Err(e) = http
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        log::error("http server failed", &[("error", e.into())]);
        code = ExitCode::FAILURE;
    }
    log::info("stopped", &[]);
    code
}

async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// SIGTERM or SIGINT; both handlers are registered now, not at the first poll.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (term, interrupt) {
            (Ok(mut term), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                log::warn("no SIGTERM handler", &[("error", Value::from(e.to_string()))]);
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
