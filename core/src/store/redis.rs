//! The Redis store: one atomic script call per decision over one shared,
//! multiplexed connection (or a cluster connection), EVALSHA with a fallback
//! to EVAL when the server lost its script cache.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, ServerErrorKind};

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
    generation: AtomicU64,
    sha: String,
    connect_timeout: Duration,
}

impl RedisStore {
    /// Parses the store URL; connects lazily, on the first decision.
    pub fn open(url: &str, connect_timeout: Duration) -> Result<RedisStore> {
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
            Target::Cluster(redis::cluster::ClusterClient::new(nodes).map_err(bad)?)
        } else {
            Target::Single(redis::Client::open(url).map_err(bad)?)
        };
        Ok(RedisStore {
            target,
            connection: Mutex::new(None),
            connection_pid: AtomicU32::new(0),
            connecting: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            sha: script_sha(),
            connect_timeout,
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
        let _connecting = self.connecting.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let connection = match &self.target {
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
        };
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slot = self.connection.lock();
        self.connection_pid.store(std::process::id(), Ordering::Relaxed);
        *slot = Some((generation, connection.clone()));
        drop(slot);
        Ok((generation, connection))
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

    /// Runs one decision. Returns the store's `now` and a verdict per check.
    /// Atomic across all checks on a single server; on a cluster, checks whose
    /// keys live in different slots are decided one slot at a time.
    pub async fn decide(&self, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64) -> Result<(i64, Vec<Verdict>)> {
        let tag = |c: &RedisCheck<'_>| c.keys[0].rsplit_once('{').map(|(_, t)| t.to_string());
        if matches!(self.target, Target::Cluster(_)) && checks.iter().any(|c| tag(c) != tag(&checks[0])) {
            let mut store_now = None;
            let mut verdicts = Vec::with_capacity(checks.len());
            for check in checks {
                let (n, v) = self
                    .decide_in_one_slot(std::slice::from_ref(check), now.or(store_now), cost)
                    .await?;
                store_now.get_or_insert(n);
                verdicts.extend(v);
            }
            return Ok((store_now.unwrap_or_default(), verdicts));
        }
        self.decide_in_one_slot(checks, now, cost).await
    }

    async fn decide_in_one_slot(
        &self,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
    ) -> Result<(i64, Vec<Verdict>)> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha);
        push_args(&mut cmd, checks, now, cost);
        let (generation, mut connection) = self.connection().await?;
        let mut reply = Self::query(&mut connection, &cmd).await;
        if matches!(&reply, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // The server restarted or ran SCRIPT FLUSH: EVAL loads the script again.
            let mut eval = redis::cmd("EVAL");
            eval.arg(SCRIPT);
            push_args(&mut eval, checks, now, cost);
            reply = Self::query(&mut connection, &eval).await;
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
        let (generation, mut connection) = self.connection().await?;
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
/// ours), as opposed to the store being unavailable.
fn is_key_error(e: &RedisError) -> bool {
    match e.code() {
        Some("WRONGTYPE") | Some("POLYLIMIT_STATE") => true,
        Some("ERR") => e
            .detail()
            .is_some_and(|d| d.contains("script") || d.contains("WRONGTYPE")),
        _ => false,
    }
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
