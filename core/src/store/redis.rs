//! The Redis store: one atomic script call per decision over one shared,
//! multiplexed connection (or a cluster connection), EVALSHA with a fallback
//! to EVAL when the server lost its script cache.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind};

use crate::algorithm::penalty::PenaltyParams;
use crate::algorithm::{Params, Verdict};
use crate::error::{Error, Result};

/// The decision script: the algorithm functions then the dispatcher.
pub const SCRIPT: &str = concat!(
    include_str!("../../lua/common.lua"),
    include_str!("../../lua/token_bucket.lua"),
    include_str!("../../lua/gcra.lua"),
    include_str!("../../lua/leaky_bucket.lua"),
    include_str!("../../lua/fixed_window.lua"),
    include_str!("../../lua/sliding_window_counter.lua"),
    include_str!("../../lua/sliding_window_log.lua"),
    include_str!("../../lua/penalty.lua"),
    include_str!("../../lua/check.lua"),
);

/// The SHA1 of [`SCRIPT`], as EVALSHA wants it.
pub fn script_sha() -> String {
    redis::Script::new(SCRIPT).get_hash().to_string()
}

/// One policy's part of a decision: its store keys (the penalty record's
/// last, when it has a penalty) and its script arguments.
pub(crate) struct RedisCheck<'a> {
    pub params: &'a Params,
    pub keys: &'a [String],
    pub shadow: bool,
    pub penalty: Option<&'a PenaltyParams>,
}

#[derive(Clone)]
enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

#[allow(clippy::large_enum_variant)] // built once per store
enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// A Redis deployment reached through one shared connection.
pub(crate) struct RedisStore {
    target: Target,
    /// The live connection and its generation, cloned by every call.
    connection: Mutex<Option<(u64, Connection)>>,
    /// The process that opened it: a forked child inherits the connection
    /// but not the task doing its I/O, and must open its own.
    connection_pid: AtomicU32,
    connecting: tokio::sync::Mutex<()>,
    /// Failed connect attempts: a caller that waited for another's attempt
    /// shares its failure instead of trying again in turn.
    failed_connects: AtomicU64,
    generation: AtomicU64,
    sha: String,
    /// Deadline of every call on an open connection.
    timeout: Duration,
    /// Deadline of opening one (TCP, TLS and the handshake).
    connect_timeout: Duration,
}

/// Timeouts of a store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Every call on an open connection.
    pub call: Duration,
    /// Opening a connection: TCP, TLS and the handshake.
    pub connect: Duration,
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

impl RedisStore {
    /// Parses the store URL; connects lazily, on the first decision.
    pub fn open(url: &str, timeouts: Timeouts) -> Result<RedisStore> {
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
            Target::Cluster(
                redis::cluster::ClusterClientBuilder::new(nodes)
                    .tcp_settings(tcp_settings())
                    .connection_timeout(timeouts.connect)
                    .build()
                    .map_err(bad)?,
            )
        } else {
            let info = url
                .into_connection_info()
                .map_err(bad)?
                .set_tcp_settings(tcp_settings());
            Target::Single(redis::Client::open(info).map_err(bad)?)
        };
        Ok(RedisStore {
            target,
            connection: Mutex::new(None),
            connection_pid: AtomicU32::new(0),
            connecting: tokio::sync::Mutex::new(()),
            failed_connects: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            sha: script_sha(),
            timeout: timeouts.call,
            connect_timeout: timeouts.connect,
        })
    }

    fn live(&self) -> Option<(u64, Connection)> {
        let slot = self.connection.lock();
        slot.clone()
            .filter(|_| self.connection_pid.load(Ordering::Relaxed) == std::process::id())
    }

    async fn connection(&self) -> Result<(u64, Connection)> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        // One connect at a time; the others wait for it and share the result.
        let failed = self.failed_connects.load(Ordering::Acquire);
        let _connecting = self.connecting.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        if self.failed_connects.load(Ordering::Acquire) != failed {
            return Err(Error::StoreUnavailable {
                message: "cannot connect (the attempt this call waited for failed)".into(),
                source: None,
            });
        }
        let connection = self.connect().await.inspect_err(|_| {
            self.failed_connects.fetch_add(1, Ordering::AcqRel);
        })?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slot = self.connection.lock();
        self.connection_pid.store(std::process::id(), Ordering::Relaxed);
        *slot = Some((generation, connection.clone()));
        drop(slot);
        Ok((generation, connection))
    }

    /// Opens a connection within `connect_timeout`.
    async fn connect(&self) -> Result<Connection> {
        Ok(match &self.target {
            Target::Single(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(None);
                Connection::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map_err(unavailable)?,
                )
            }
            Target::Cluster(client) => {
                let connect = client.get_async_connection();
                let connection = tokio::time::timeout(self.connect_timeout, connect)
                    .await
                    .map_err(|_| Error::StoreUnavailable {
                        message: "cluster connect timed out".into(),
                        source: None,
                    })?
                    .map_err(unavailable)?;
                Connection::Cluster(connection)
            }
        })
    }

    /// Drops the connection a failed call used, so the next call reconnects.
    fn forget(&self, generation: u64) {
        let mut slot = self.connection.lock();
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }

    async fn query(connection: &mut Connection, cmd: &Cmd) -> Result<Vec<i64>, RedisError> {
        match connection {
            Connection::Single(c) => cmd.query_async(c).await,
            Connection::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Runs `call` on the connection (opened within `connect_timeout` if
    /// needed) within `timeout`. A call that times out drops the connection:
    /// behind a stuck proxy or a half-open TCP connection, the next call must
    /// not wait on the same dead socket.
    async fn with_connection<T, F>(&self, call: impl FnOnce(u64, Connection) -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let (generation, connection) = self.connection().await?;
        match tokio::time::timeout(self.timeout, call(generation, connection)).await {
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

    /// Runs one decision. Returns the store's `now` and a verdict per check.
    /// Atomic across all checks on a single server; on a cluster, checks whose
    /// keys live in different slots are decided one slot at a time.
    pub async fn decide(&self, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64) -> Result<(i64, Vec<Verdict>)> {
        self.with_connection(|generation, connection| self.decide_on(generation, connection, checks, now, cost))
            .await
    }

    async fn decide_on(
        &self,
        generation: u64,
        mut connection: Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
    ) -> Result<(i64, Vec<Verdict>)> {
        let tag = |c: &RedisCheck<'_>| c.keys[0].rsplit_once('{').map(|(_, t)| t.to_string());
        if matches!(self.target, Target::Cluster(_)) && checks.iter().any(|c| tag(c) != tag(&checks[0])) {
            let mut store_now = None;
            let mut verdicts = Vec::with_capacity(checks.len());
            for check in checks {
                let (n, v) = self
                    .decide_in_one_slot(
                        generation,
                        &mut connection,
                        std::slice::from_ref(check),
                        now.or(store_now),
                        cost,
                    )
                    .await?;
                store_now.get_or_insert(n);
                verdicts.extend(v);
            }
            return Ok((store_now.unwrap_or_default(), verdicts));
        }
        self.decide_in_one_slot(generation, &mut connection, checks, now, cost)
            .await
    }

    async fn decide_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
    ) -> Result<(i64, Vec<Verdict>)> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha);
        push_args(&mut cmd, checks, now, cost);
        let mut reply = Self::query(connection, &cmd).await;
        if matches!(&reply, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // The server restarted or ran SCRIPT FLUSH: EVAL loads the script again.
            let mut eval = redis::cmd("EVAL");
            eval.arg(SCRIPT);
            push_args(&mut eval, checks, now, cost);
            reply = Self::query(connection, &eval).await;
        }
        let values = reply.map_err(|e| {
            if is_key_error(&e) {
                let keys: Vec<&str> = checks.iter().flat_map(|c| c.keys.iter().map(String::as_str)).collect();
                Error::Store {
                    key: keys.join(" "),
                    message: e.to_string(),
                }
            } else {
                self.forget(generation);
                unavailable(e)
            }
        })?;
        parse_reply(&values, checks.len())
    }

    /// Deletes keys.
    pub async fn delete(&self, keys: &[String]) -> Result<()> {
        self.with_connection(|generation, connection| self.delete_on(generation, connection, keys))
            .await
    }

    async fn delete_on(&self, generation: u64, mut connection: Connection, keys: &[String]) -> Result<()> {
        // One DEL per key: in a cluster the policies' keys may live in different slots.
        for key in keys {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            let reply: Result<i64, RedisError> = match &mut connection {
                Connection::Single(c) => cmd.query_async(c).await,
                Connection::Cluster(c) => cmd.query_async(c).await,
            };
            reply.map_err(|e| {
                self.forget(generation);
                unavailable(e)
            })?;
        }
        Ok(())
    }
}

/// `numkeys key... now cost (kind count period burst max_delay flags
/// threshold within forget_after cooldowns)...`
fn push_args(cmd: &mut Cmd, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64) {
    cmd.arg(checks.iter().map(|c| c.keys.len()).sum::<usize>());
    for check in checks {
        for key in check.keys {
            cmd.arg(key.as_str());
        }
    }
    match now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    cmd.arg(cost);
    for check in checks {
        let p = check.params;
        cmd.arg(p.kind as i64)
            .arg(p.count)
            .arg(p.period)
            .arg(p.burst)
            .arg(p.max_delay)
            .arg(check.shadow as i64);
        match check.penalty {
            Some(pen) => {
                let cooldowns: Vec<String> = pen.cooldowns.iter().map(i64::to_string).collect();
                cmd.arg(pen.threshold)
                    .arg(pen.within)
                    .arg(pen.forget_after)
                    .arg(cooldowns.join(","));
            }
            None => {
                cmd.arg(0).arg(0).arg(0).arg("");
            }
        }
    }
}

/// Errors caused by one key's contents (someone SET it, or its state is not
/// ours), as opposed to the store being unable to decide. Only these reach
/// the caller; anything else (OOM, READONLY, MASTERDOWN, BUSY, LOADING,
/// CROSSSLOT, TRYAGAIN, a second NOSCRIPT, a script error) is a store failure
/// that feeds the breaker and the fallback.
fn is_key_error(e: &RedisError) -> bool {
    e.code()
        .is_some_and(|code| is_key_error_reply(code, e.detail().unwrap_or("")))
}

/// The same over an error reply's code (its first word) and the rest.
/// Redis 7 passes an error raised inside the script through with its own
/// code (`WRONGTYPE … script: <sha>, on @user_script:1.`); Redis 6.2 and
/// older wrap it: `ERR Error running script (call to f_<sha>):
/// @user_script:1: [@user_script: 1: ][-]WRONGTYPE …`.
fn is_key_error_reply(code: &str, detail: &str) -> bool {
    const KEY_CODES: [&str; 2] = ["WRONGTYPE", "POLYLIMIT_STATE"];
    if KEY_CODES.contains(&code) {
        return true;
    }
    if code != "ERR" {
        return false;
    }
    let Some(rest) = detail
        .strip_prefix("Error running script")
        .and_then(|rest| rest.split_once("): "))
        .map(|(_, rest)| rest)
    else {
        return false;
    };
    let mut rest = rest.trim_start();
    while let Some(after) = rest.strip_prefix("@user_script") {
        rest = after.trim_start_matches(|c: char| c == ':' || c == ' ' || c.is_ascii_digit());
    }
    let inner = rest.trim_start_matches('-').split_whitespace().next().unwrap_or("");
    KEY_CODES.contains(&inner)
}

fn unavailable(e: RedisError) -> Error {
    Error::StoreUnavailable {
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

fn parse_reply(values: &[i64], checks: usize) -> Result<(i64, Vec<Verdict>)> {
    if values.len() != 2 + 6 * checks {
        return Err(Error::Internal(format!(
            "decision script returned {} values for {checks} policies",
            values.len()
        )));
    }
    let verdicts = values[2..]
        .chunks_exact(6)
        .map(|v| Verdict {
            allowed: v[0] == 1,
            remaining: v[1].max(0) as u64,
            reset_after_ms: v[2].max(0) as u64,
            retry_after_ms: (v[3] >= 0).then_some(v[3] as u64),
            delay_ms: v[4].max(0) as u64,
            penalized: v[5] == 1,
        })
        .collect();
    Ok((values[1], verdicts))
}

#[cfg(test)]
mod tests {
    use super::is_key_error_reply;

    fn classify(reply: &str) -> bool {
        let (code, detail) = reply.split_once(' ').unwrap_or((reply, ""));
        is_key_error_reply(code, detail)
    }

    #[test]
    fn only_foreign_data_on_a_key_is_a_key_error() {
        let key_errors = [
            // Redis 7.0 (seen from redis-server 7.0.15).
            "WRONGTYPE Operation against a key holding the wrong kind of value script: \
             30ada88aea1b8902e826c526ebaa64270516b3ec, on @user_script:1.",
            "POLYLIMIT_STATE key polylimit:tb:default:{k} does not hold polylimit state script: \
             de292b07dca952a71afe118fc94f3df1b8c9f467, on @user_script:24.",
            // Redis 6.2.
            "ERR Error running script (call to f_30ada88aea1b8902e826c526ebaa64270516b3ec): \
             @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value",
            // Redis 5.0 / 6.0.
            "ERR Error running script (call to f_30ada88aea1b8902e826c526ebaa64270516b3ec): \
             @user_script:1: @user_script: 1: WRONGTYPE Operation against a key holding the wrong kind of value",
        ];
        for reply in key_errors {
            assert!(classify(reply), "a key error: {reply}");
        }
        let store_failures = [
            "OOM command not allowed when used memory > 'maxmemory'. script: \
             2d2f22d62c337ce7b30ad29cff94471eb0bc1784, on @user_script:1.",
            "ERR Error running script (call to f_2d2f22d62c337ce7b30ad29cff94471eb0bc1784): \
             @user_script:1: -OOM command not allowed when used memory > 'maxmemory'.",
            "ERR Error running script (call to f_2d2f22d62c337ce7b30ad29cff94471eb0bc1784): \
             @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.",
            "READONLY You can't write against a read only replica. script: \
             2d2f22d62c337ce7b30ad29cff94471eb0bc1784, on @user_script:1.",
            "READONLY You can't write against a read only replica.",
            "ERR Error running script (call to f_2d2f22d62c337ce7b30ad29cff94471eb0bc1784): \
             @user_script:1: -READONLY You can't write against a read only replica.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "ERR Error running script (call to f_2d2f22d62c337ce7b30ad29cff94471eb0bc1784): \
             @user_script:1: -MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "LOADING Redis is loading the dataset in memory",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "NOSCRIPT No matching script. Please use EVAL.",
            "ERR user_script:1: attempt to perform arithmetic on a nil value script: \
             e8f647a6e338d050a115f7d097171925636246d4, on @user_script:1.",
            "ERR Unknown Redis command called from script script: \
             f01f0776df71cc5b400c2268135aa7f30dce2e53, on @user_script:1.",
            "ERR Error running script (call to f_e8f647a6e338d050a115f7d097171925636246d4): \
             @user_script:1: user_script:1: attempt to perform arithmetic on a nil value",
            "ERR max number of clients reached",
            "NOPERM this user has no permissions to run the 'evalsha' command",
        ];
        for reply in store_failures {
            assert!(!classify(reply), "a store failure: {reply}");
        }
    }
}
