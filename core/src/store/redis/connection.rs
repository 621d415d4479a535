//! Connection and topology: a standalone server, a cluster or the primary
//! sentinels name, over TCP or TLS, connected lazily in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, IntoConnectionInfo, RedisError};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// Timeouts of a store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Every call, waiting for a connection included.
    pub call: Duration,
    /// Opening a connection: TCP, TLS and the handshake.
    pub connect: Duration,
}

/// A Redis deployment's one shared connection, opened in the background.
pub(super) struct Connector {
    target: Arc<Target>,
    shared: Arc<Shared>,
    /// Deadline of every call, waiting for a connect included.
    timeout: Duration,
    /// Deadline of opening a connection (TCP, TLS and the handshake), which
    /// runs in the background and outlives the calls that gave up on it.
    connect_timeout: Duration,
}

#[derive(Clone)]
pub(super) enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

#[allow(clippy::large_enum_variant)] // built once per store
enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
    /// The primary the sentinels name, asked again on every connect, so a
    /// failover is followed by the next connect after a failed call.
    Sentinel(tokio::sync::Mutex<redis::sentinel::SentinelClient>),
}

/// A connection and its generation (a failed call forgets only its own).
type Live = (u64, Connection);

/// What one connect attempt's waiters see: nothing yet, then the connection
/// or why there is none.
type Outcome = Option<std::result::Result<Live, String>>;

/// One connect attempt running in the background.
struct Attempt {
    id: u64,
    /// The process that started it: a forked child inherits the record but
    /// not the task, and must start its own.
    pid: u32,
    outcome: watch::Receiver<Outcome>,
    /// Cancels it when the store is dropped.
    task: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct Slot {
    /// The live connection, cloned by every call.
    live: Option<Live>,
    /// The process that opened it: a forked child inherits the connection
    /// but not the task doing its I/O, and must open its own.
    live_pid: u32,
    /// The connect attempt in flight, at most one. A finished attempt is
    /// removed: its waiters got its outcome, and the next call starts anew.
    attempt: Option<Attempt>,
}

/// The state connect tasks report to; they hold it weakly, so a dropped
/// store is not kept alive (a task ends within `connect_timeout` anyway).
#[derive(Default)]
struct Shared {
    slot: Mutex<Slot>,
    generation: AtomicU64,
    attempts: AtomicU64,
}

/// TCP settings of every connection: keepalive probes (after 10 s idle, every
/// 5 s, 3 unanswered close it) and, on Linux, `TCP_USER_TIMEOUT` (10 s of
/// unacknowledged data close it) notice a peer that vanished without a FIN
/// (a half-open connection, a stuck proxy) even while no call waits on it.
/// A call that times out drops its connection anyway.
fn tcp_settings() -> TcpSettings {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let keepalive = keepalive.with_retries(3);
    let settings = TcpSettings::default().set_keepalive(keepalive);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let settings = settings.set_user_timeout(Duration::from_secs(10));
    settings
}

/// Where a call gets its connection from.
enum Source {
    Live(Live),
    Attempt(watch::Receiver<Outcome>),
    Failed(String),
}

impl Connector {
    /// Parses the store URL; connects lazily, on the first call. With
    /// `tls_ca` (PEM), TLS connections trust that CA instead of the public web CAs.
    pub(super) fn open(url: &str, timeouts: Timeouts, tls_ca: Option<Vec<u8>>) -> Result<Connector> {
        // rustls picks no crypto provider by itself: without one every TLS
        // connect would panic in its task. Another library may have installed
        // one already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: tls_ca.clone(),
        };
        let bad = |e: RedisError| Error::config("store", format!("{url:?}"), format!("is not a usable Redis URL: {e}"));
        let target = if let Some(rest) = url
            .strip_prefix("redis+cluster://")
            .or_else(|| url.strip_prefix("rediss+cluster://"))
        {
            let scheme = if url.starts_with("rediss") { "rediss" } else { "redis" };
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), rest),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("{scheme}://{auth}{h}"))
                .collect();
            if nodes.is_empty() {
                return Err(Error::config("store", format!("{url:?}"), "names no cluster node"));
            }
            let mut builder = redis::cluster::ClusterClientBuilder::new(nodes);
            if tls_ca.is_some() {
                builder = builder.certs(certificates());
            }
            Target::Cluster(
                builder
                    .tcp_settings(tcp_settings())
                    // Each node within a third of the connect budget: a node
                    // that accepts but never answers (paused, partitioned)
                    // fails alone, and the connection forms from the others.
                    .connection_timeout(timeouts.connect / 3)
                    .response_timeout(timeouts.call)
                    .build()
                    .map_err(bad)?,
            )
        } else if let Some(rest) = url
            .strip_prefix("redis+sentinel://")
            .or_else(|| url.strip_prefix("rediss+sentinel://"))
        {
            Target::Sentinel(tokio::sync::Mutex::new(sentinel_client(
                url,
                rest,
                tls_ca.as_ref().map(|_| certificates()),
            )?))
        } else {
            let info = url
                .into_connection_info()
                .map_err(bad)?
                .set_tcp_settings(tcp_settings());
            Target::Single(match &tls_ca {
                Some(_) => redis::Client::build_with_tls(info, certificates()).map_err(bad)?,
                None => redis::Client::open(info).map_err(bad)?,
            })
        };
        Ok(Connector {
            shared: Arc::new(Shared::default()),
            target: Arc::new(target),
            timeout: timeouts.call,
            connect_timeout: timeouts.connect,
        })
    }

    /// Whether the deployment is a cluster (its keys spread over slots).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(*self.target, Target::Cluster(_))
    }

    /// The live connection, else the attempt in flight to wait for, starting
    /// one (in the background, at most one at a time) if there is none.
    fn source(&self) -> Source {
        let pid = crate::pid::current();
        let mut slot = self.shared.slot.lock();
        if let Some(live) = slot.live.as_ref().filter(|_| slot.live_pid == pid) {
            return Source::Live(live.clone());
        }
        // An attempt whose task ended without reporting (its runtime shut
        // down) is over too.
        let running = |a: &&Attempt| a.pid == pid && a.outcome.has_changed().is_ok();
        if let Some(attempt) = slot.attempt.as_ref().filter(running) {
            return Source::Attempt(attempt.outcome.clone());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Source::Failed("cannot connect outside a tokio runtime".into());
        };
        let id = self.shared.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let (report, outcome) = watch::channel(None);
        slot.attempt = Some(Attempt {
            id,
            pid,
            outcome: outcome.clone(),
            task: None,
        });
        drop(slot);
        let task = runtime.spawn(attempt(
            self.target.clone(),
            self.connect_timeout,
            Arc::downgrade(&self.shared),
            id,
            pid,
            report,
        ));
        let mut slot = self.shared.slot.lock();
        match slot.attempt.as_mut().filter(|a| a.id == id) {
            Some(attempt) => attempt.task = Some(task.abort_handle()),
            None => drop(slot), // already over
        }
        Source::Attempt(outcome)
    }

    /// The connection, waiting until `deadline` at most for a connect in
    /// flight. Giving up does not cancel the connect: once it succeeds, the
    /// next calls use its connection. Callers waiting on an attempt that
    /// fails share its failure instead of each trying again in turn.
    async fn connection(&self, deadline: tokio::time::Instant) -> Result<Live> {
        let mut outcome = match self.source() {
            Source::Live(live) => return Ok(live),
            Source::Failed(message) => return Err(Error::StoreUnavailable { message, source: None }),
            Source::Attempt(outcome) => outcome,
        };
        let failed = |message: String| Error::StoreUnavailable { message, source: None };
        let waited = tokio::time::timeout_at(deadline, outcome.wait_for(Option::is_some)).await;
        let result = match waited {
            Err(_) => Err(failed(format!(
                "no connection within the {:?} timeout (connecting goes on in the background)",
                self.timeout
            ))),
            Ok(Err(_)) => Err(failed("the connect attempt ended without an outcome".into())),
            Ok(Ok(done)) => match &*done {
                Some(Ok(live)) => Ok(live.clone()),
                Some(Err(message)) => Err(failed(format!("cannot connect: {message}"))),
                None => Err(failed("the connect attempt ended without an outcome".into())),
            },
        };
        result
    }

    /// The address of a standalone server reached over plain TCP with no
    /// AUTH, no SELECT and RESP2 (a host's own socket then needs no
    /// handshake: the sans-I/O path); `None` for anything else.
    pub(super) fn plain_tcp_address(&self) -> Option<(String, u16)> {
        let Target::Single(client) = &*self.target else {
            return None;
        };
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        let plain = settings.db() == 0
            && settings.username().is_none()
            && settings.password().is_none()
            && settings.protocol() == redis::ProtocolVersion::RESP2;
        match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) if plain => Some((host.clone(), *port)),
            _ => None,
        }
    }

    /// The generation of the live connection (none: not connected, or
    /// another process's).
    pub(super) fn live_generation(&self) -> Option<u64> {
        let slot = self.shared.slot.lock();
        slot.live
            .as_ref()
            .filter(|_| slot.live_pid == crate::pid::current())
            .map(|(g, _)| *g)
    }

    /// Every call's own timeout.
    pub(super) fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// Drops the connection a failed call used, so the next call reconnects.
    pub(super) fn forget(&self, generation: u64) {
        let mut slot = self.shared.slot.lock();
        if slot.live.as_ref().is_some_and(|(g, _)| *g == generation) {
            slot.live = None;
        }
    }

    pub(super) async fn query<T: FromRedisValue>(connection: &mut Connection, cmd: &Cmd) -> Result<T, RedisError> {
        match connection {
            Connection::Single(c) => cmd.query_async(c).await,
            Connection::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Runs `call` on the connection within `timeout`, waiting for a
    /// connect included. A call that times out drops the connection: behind
    /// a stuck proxy or a half-open TCP connection, the next call must not
    /// wait on the same dead socket.
    pub(super) async fn with_connection<T, F>(&self, call: impl FnOnce(u64, Connection) -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        // Its own timeout, or what is left of the check's budget when sooner.
        let own = tokio::time::Instant::now() + self.timeout;
        let deadline = crate::store::budget::deadline().map_or(own, |budget| budget.min(own));
        let (generation, connection) = self.connection(deadline).await?;
        match tokio::time::timeout_at(deadline, call(generation, connection)).await {
            Ok(result) => result,
            Err(_) => {
                self.forget(generation);
                Err(Error::StoreUnavailable {
                    message: format!("no reply within the {:?} timeout", self.timeout),
                    source: None,
                })
            }
        }
    }
}

impl Drop for Connector {
    /// Cancels a connect in flight: nothing of the store outlives it. (Not
    /// one a forked child inherited: its runtime is the parent's.)
    fn drop(&mut self) {
        let attempt = self.shared.slot.lock().attempt.take();
        if let Some(Attempt {
            pid, task: Some(task), ..
        }) = attempt
        {
            if pid == crate::pid::current() {
                task.abort();
            }
        }
    }
}

/// A failed call or connect: the store cannot answer.
pub(super) fn unavailable(e: RedisError) -> Error {
    Error::StoreUnavailable {
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// One connect attempt, run as its own task: opens a connection within
/// `connect_timeout`, installs it for the next calls (unless the store is
/// gone or a newer attempt replaced this one) and reports the outcome to the
/// calls still waiting.
async fn attempt(
    target: Arc<Target>,
    connect_timeout: Duration,
    shared: Weak<Shared>,
    id: u64,
    pid: u32,
    report: watch::Sender<Outcome>,
) {
    let result = connect(&target, connect_timeout).await;
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let outcome = {
        let mut slot = shared.slot.lock();
        let current = slot.attempt.as_ref().is_some_and(|a| a.id == id);
        if current {
            slot.attempt = None;
        }
        match result {
            Ok(connection) => {
                let generation = shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
                if current {
                    slot.live = Some((generation, connection.clone()));
                    slot.live_pid = pid;
                }
                Ok((generation, connection))
            }
            Err(e) => Err(e.to_string()),
        }
    };
    // Nobody may be waiting any more: that is fine.
    let _ = report.send(Some(outcome));
}

/// Opens a connection within `connect_timeout`.
async fn connect(target: &Target, connect_timeout: Duration) -> Result<Connection> {
    let timed_out = || Error::StoreUnavailable {
        message: format!("connect timed out after {connect_timeout:?}"),
        source: None,
    };
    Ok(match target {
        Target::Single(client) => {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(None);
            let connect = client.get_multiplexed_async_connection_with_config(&config);
            let connection = tokio::time::timeout(connect_timeout, connect)
                .await
                .map_err(|_| timed_out())?
                .map_err(unavailable)?;
            Connection::Single(connection)
        }
        Target::Cluster(client) => {
            let connect = client.get_async_connection();
            let connection = tokio::time::timeout(connect_timeout, connect)
                .await
                .map_err(|_| timed_out())?
                .map_err(unavailable)?;
            Connection::Cluster(connection)
        }
        Target::Sentinel(client) => {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(None);
            let connect = async { client.lock().await.get_async_connection_with_config(&config).await };
            let connection = tokio::time::timeout(connect_timeout, connect)
                .await
                .map_err(|_| timed_out())?
                .map_err(unavailable)?;
            Connection::Single(connection)
        }
    })
}

/// `redis+sentinel://[user:password@]host:port[,host:port…]/<service>[/<db>]`
/// (`rediss+sentinel://` for TLS, to the sentinels and the primary alike):
/// the sentinels to ask, and the service whose primary they name. The user,
/// password and database are the primary's; the sentinels are asked without
/// them. `certificates` replace the public web CAs for TLS.
fn sentinel_client(
    url: &str,
    rest: &str,
    certificates: Option<redis::TlsCertificates>,
) -> Result<redis::sentinel::SentinelClient> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let bad = |why: &str| Error::config("store", format!("{url:?}"), why.to_string());
    let unusable = |e: RedisError| bad(&format!("is not a usable Redis URL: {e}"));
    let tls = url.starts_with("rediss");
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (format!("{auth}@"), rest),
        None => (String::new(), rest),
    };
    let no_service = "names no service: redis+sentinel://host:port[,host:port]/<service>";
    let (hosts, path) = rest.split_once('/').ok_or_else(|| bad(no_service))?;
    let (service, db) = path.split_once('/').unwrap_or((path, ""));
    if service.is_empty() {
        return Err(bad(no_service));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let sentinels = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| Ok(format!("{scheme}://{h}").into_connection_info()?.addr().clone()))
        .collect::<Result<Vec<_>, RedisError>>()
        .map_err(unusable)?;
    if sentinels.is_empty() {
        return Err(bad("names no sentinel"));
    }
    // The primary's user, password and database, read from the same URL
    // written as a plain one.
    let primary = format!("redis://{auth}127.0.0.1:6379/{db}")
        .into_connection_info()
        .map_err(unusable)?;
    let primary = primary.redis_settings();
    let mut builder = SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master)
        .map_err(unusable)?
        .set_client_to_redis_db(primary.db())
        .set_client_to_redis_tcp_settings(tcp_settings())
        .set_client_to_sentinel_tcp_settings(tcp_settings());
    if let Some(user) = primary.username() {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = primary.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    if tls {
        // The sentinels' addresses are TLS ones already (rediss://).
        builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
        if let Some(certificates) = certificates {
            builder = builder
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_certificates(certificates);
        }
    }
    builder.build().map_err(unusable)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Connector, Timeouts};
    use crate::error::Error;

    /// A store on a listener that never answers: calls give up after 20 ms,
    /// a connect would go on for 30 s.
    fn silent_store() -> (std::net::TcpListener, Connector) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://127.0.0.1:{}", silent.local_addr().unwrap().port());
        let timeouts = Timeouts {
            call: Duration::from_millis(20),
            connect: Duration::from_secs(30),
        };
        (silent, Connector::open(&url, timeouts, None).unwrap())
    }

    /// A call on the connection, which waits for a connect (and gives up).
    async fn call(store: &Connector) -> Result<(), Error> {
        store.with_connection(|_, _| async { Ok(()) }).await
    }

    // A listener that never accepts: the kernel completes the TCP handshake,
    // nothing answers Redis's. The call gives up after its timeout; the
    // connect goes on until the store is dropped, and not after.
    #[tokio::test]
    async fn a_connect_in_flight_ends_with_its_store() {
        let (_silent, store) = silent_store();
        assert!(call(&store).await.is_err());
        assert!(store.shared.slot.lock().attempt.is_some(), "the connect goes on");
        let (shared, target) = (Arc::downgrade(&store.shared), Arc::downgrade(&store.target));
        drop(store);
        assert!(
            shared.upgrade().is_none(),
            "the connect task keeps no store state alive"
        );
        for _ in 0..100 {
            if target.upgrade().is_none() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the connect task outlived its store");
    }

    // A runtime shut down with a connect in flight drops its task unheard:
    // the next call, on another runtime, starts a new attempt instead of
    // failing on the dead one forever.
    #[test]
    fn an_attempt_lost_with_its_runtime_is_replaced() {
        let (_silent, store) = silent_store();
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let attempt = |store: &Connector| store.shared.slot.lock().attempt.as_ref().map(|a| a.id);
        assert!(runtime().block_on(call(&store)).is_err());
        assert_eq!(attempt(&store), Some(1));
        assert!(runtime().block_on(call(&store)).is_err());
        assert_eq!(attempt(&store), Some(2), "a new attempt on the new runtime");
    }
}
