//! The Redis store: one atomic call per decision over one shared,
//! multiplexed connection (or a cluster connection). On Redis 7 the decision
//! is a function (FCALL of a library loaded once, reloaded when the server
//! lost it); where functions are missing or not permitted, and on Cluster,
//! the same code runs as a script (EVALSHA, EVAL when the server lost its
//! script cache).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo, RedisError, ServerErrorKind};
use tokio::sync::watch;

use crate::algorithm::penalty::PenaltyParams;
use crate::algorithm::{Kind, Params, Verdict};
use crate::error::{Error, Result};
use crate::store::overrides::Charged;

/// The algorithm functions of the decision code.
macro_rules! algorithms {
    () => {
        concat!(
            include_str!("../../lua/common.lua"),
            include_str!("../../lua/token_bucket.lua"),
            include_str!("../../lua/gcra.lua"),
            include_str!("../../lua/leaky_bucket.lua"),
            include_str!("../../lua/fixed_window.lua"),
            include_str!("../../lua/sliding_window_counter.lua"),
            include_str!("../../lua/sliding_window_log.lua"),
            include_str!("../../lua/concurrency.lua"),
            include_str!("../../lua/penalty.lua"),
            include_str!("../../lua/overrides.lua"),
            include_str!("../../lua/adaptive.lua"),
            include_str!("../../lua/dispatch.lua"),
        )
    };
}

/// The dispatcher: one decision over `KEYS` and `ARGV`.
const CHECK: &str = include_str!("../../lua/check.lua");

/// The decision script: the algorithm functions then the dispatcher.
pub const SCRIPT: &str = concat!(algorithms!(), include_str!("../../lua/check.lua"));

/// The refund script: gives back what admissions charged (used when a
/// cross-slot decision denies after earlier slots were charged). Separate
/// from [`SCRIPT`], so the decision path is unchanged; always a script.
pub(crate) const REFUND_SCRIPT: &str = concat!(
    include_str!("../../lua/common.lua"),
    include_str!("../../lua/overrides.lua"),
    include_str!("../../lua/refund.lua")
);

/// The release script: removes concurrency leases. Always a script.
pub(crate) const RELEASE_SCRIPT: &str = concat!(
    include_str!("../../lua/common.lua"),
    include_str!("../../lua/concurrency.lua"),
    include_str!("../../lua/release.lua")
);

/// The SHA1 of [`SCRIPT`], as EVALSHA wants it.
pub fn script_sha() -> String {
    redis::Script::new(SCRIPT).get_hash().to_string()
}

/// The decision code as a Redis 7 function library. Its top level (every
/// algorithm's function) runs once, when the library loads; a script runs
/// it on every call. Library and function are named after the script's
/// SHA1, so processes running different polylimit versions on one Redis each
/// call their own.
pub struct Library {
    /// The name of the library and of its one function, for FCALL.
    pub function: String,
    /// The source, for FUNCTION LOAD.
    pub code: String,
}

/// The decision library ([`Library`]).
pub fn library() -> &'static Library {
    static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
        let function = format!("polylimit_{}", &script_sha()[..16]);
        let code = format!(
            "#!lua name={function}\n{}\nlocal function check(KEYS, ARGV)\n{CHECK}\nend\nredis.register_function('{function}', check)\n",
            algorithms!()
        );
        Library { function, code }
    });
    &LIBRARY
}

/// One policy's part of a decision: its store keys (the penalty record's
/// after its state keys, when it has a penalty; then, with `overrides`, its
/// override record and the override's state keys) and its script arguments.
#[derive(Clone, Copy)]
pub(crate) struct RedisCheck<'a> {
    pub params: &'a Params,
    pub keys: &'a [String],
    pub shadow: bool,
    pub penalty: Option<&'a PenaltyParams>,
    /// Concurrency: the id of the lease an admission takes.
    pub lease: Option<&'a str>,
    /// The keys end with the override record and its state keys.
    pub overrides: bool,
}

/// Where each of a policy's keys stands in [`RedisCheck::keys`], in the
/// order the decision script reads them: the state keys (a sliding log has
/// two), the penalty record, the override record and the override's state
/// keys, the adaptive record. Named once: the keys are built
/// ([`KeyLayout::keys`]) and picked for a refund ([`KeyLayout::refund_keys`])
/// from it, never by counting from either end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    /// How many state keys (`Params::key_count`).
    state: usize,
    penalty: bool,
    overrides: bool,
    adaptive: bool,
}

impl KeyLayout {
    /// The layout of a policy's keys: `penalty` when it has one,
    /// `overrides` when the limiter reads per-key overrides.
    pub(crate) fn new(params: &Params, penalty: bool, overrides: bool) -> KeyLayout {
        KeyLayout {
            state: params.key_count(),
            penalty,
            overrides,
            adaptive: params.adaptive.is_some(),
        }
    }

    /// The layout of a check's keys.
    fn of(check: &RedisCheck<'_>) -> KeyLayout {
        KeyLayout::new(check.params, check.penalty.is_some(), check.overrides)
    }

    /// The position of the override record; the override's state keys follow it.
    fn override_record(&self) -> Option<usize> {
        self.overrides.then(|| self.state + self.penalty as usize)
    }

    /// How many keys.
    fn len(&self) -> usize {
        self.state + self.penalty as usize + self.overrides as usize * (1 + self.state) + self.adaptive as usize
    }

    /// The keys of `main` (a policy's main store key), in this layout.
    pub(crate) fn keys(&self, main: String, params: &Params) -> Vec<String> {
        let mut keys = Vec::with_capacity(self.len());
        if self.state == 2 {
            keys.push(format!("{main}:log"));
        }
        if self.penalty {
            keys.push(format!("{main}:penalty"));
        }
        if self.overrides {
            keys.extend(crate::store::overrides::redis_keys(&main, params).into_iter().flatten());
        }
        if self.adaptive {
            keys.push(format!("{main}:adaptive"));
        }
        keys.insert(0, main);
        debug_assert_eq!(keys.len(), self.len());
        keys
    }

    /// The keys a refund reads: the state keys, then (with overrides) the
    /// override record and the override's state keys.
    fn refund_keys<'k>(&self, keys: &'k [String]) -> impl Iterator<Item = &'k String> {
        let overrides = self.override_record().map_or(0..0, |at| at..at + 1 + self.state);
        keys[..self.state].iter().chain(&keys[overrides])
    }
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
    /// The primary the sentinels name, asked again on every connect, so a
    /// failover is followed by the next connect after a failed call.
    Sentinel(tokio::sync::Mutex<redis::sentinel::SentinelClient>),
}

/// A test hook run between the peek and the charge pass of a cross-slot
/// decision, to make a group deny in the charge pass deterministically.
pub(crate) type BetweenPasses = Arc<dyn Fn() + Send + Sync>;

/// What a cross-slot decision has charged and not given back yet: the time
/// it decided at and its checks' indices. When the decision ends without
/// finishing (the check's deadline passed, a call failed, its caller gave
/// up), these are charges of a request that is not admitted: the caller
/// gives them back off the request's path (`Engine::decide_redis`).
pub(crate) type ChargedGroups = Mutex<Option<(i64, Vec<usize>)>>;

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

/// A Redis deployment reached through one shared connection.
pub(crate) struct RedisStore {
    target: Arc<Target>,
    shared: Arc<Shared>,
    sha: String,
    refund_sha: String,
    release_sha: String,
    between_passes: Mutex<Option<BetweenPasses>>,
    /// Whether decisions go through the function library: until the server
    /// shows it has no functions (Redis < 7) or may not use them (ACL).
    functions: AtomicBool,
    /// Deadline of every call, waiting for a connect included.
    timeout: Duration,
    /// Deadline of opening a connection (TCP, TLS and the handshake), which
    /// runs in the background and outlives the calls that gave up on it.
    connect_timeout: Duration,
}

/// Timeouts of a store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Every call, waiting for a connection included.
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

/// Where a call gets its connection from.
enum Source {
    Live(Live),
    Attempt(watch::Receiver<Outcome>),
    Failed(String),
}

impl RedisStore {
    /// Parses the store URL; connects lazily, on the first decision. With
    /// `tls_ca` (PEM), TLS connections trust that CA instead of the public web CAs.
    pub fn open(url: &str, timeouts: Timeouts, tls_ca: Option<Vec<u8>>) -> Result<RedisStore> {
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
        Ok(RedisStore {
            shared: Arc::new(Shared::default()),
            sha: script_sha(),
            refund_sha: redis::Script::new(REFUND_SCRIPT).get_hash().to_string(),
            release_sha: redis::Script::new(RELEASE_SCRIPT).get_hash().to_string(),
            between_passes: Mutex::new(None),
            // Cluster decisions stay scripts: a library would have to be
            // loaded on every primary, and re-loaded on each after failover.
            functions: AtomicBool::new(!matches!(target, Target::Cluster(_))),
            target: Arc::new(target),
            timeout: timeouts.call,
            connect_timeout: timeouts.connect,
        })
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

    /// Drops the connection a failed call used, so the next call reconnects.
    fn forget(&self, generation: u64) {
        let mut slot = self.shared.slot.lock();
        if slot.live.as_ref().is_some_and(|(g, _)| *g == generation) {
            slot.live = None;
        }
    }

    async fn query<T: FromRedisValue>(connection: &mut Connection, cmd: &Cmd) -> Result<T, RedisError> {
        match connection {
            Connection::Single(c) => cmd.query_async(c).await,
            Connection::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Runs `call` on the connection within `timeout`, waiting for a
    /// connect included. A call that times out drops the connection: behind
    /// a stuck proxy or a half-open TCP connection, the next call must not
    /// wait on the same dead socket.
    async fn with_connection<T, F>(&self, call: impl FnOnce(u64, Connection) -> F) -> Result<T>
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

    /// Runs one decision. Returns the store's `now` and a verdict per check.
    /// Atomic across all checks on a single server and within a slot on a
    /// cluster; checks whose keys live in different slots are decided as in
    /// [`RedisStore::decide_across_slots`].
    /// `charged`: where a cross-slot decision records the groups it charged
    /// until it has finished ([`ChargedGroups`]).
    pub async fn decide(
        &self,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        charged: Option<&ChargedGroups>,
    ) -> Result<(i64, Vec<Verdict>)> {
        self.with_connection(|generation, connection| {
            self.decide_on(generation, connection, checks, now, cost, charged)
        })
        .await
    }

    async fn decide_on(
        &self,
        generation: u64,
        mut connection: Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        charged: Option<&ChargedGroups>,
    ) -> Result<(i64, Vec<Verdict>)> {
        if matches!(*self.target, Target::Cluster(_)) && checks.iter().any(|c| hash_tag(c) != hash_tag(&checks[0])) {
            let unrecorded = ChargedGroups::default();
            return self
                .decide_across_slots(
                    generation,
                    &mut connection,
                    checks,
                    now,
                    cost,
                    charged.unwrap_or(&unrecorded),
                )
                .await;
        }
        self.decide_in_one_slot(generation, &mut connection, checks, now, cost, false)
            .await
    }

    /// The decision [`RedisStore::decide`] would make, charging nothing and
    /// recording no penalty: one peek per slot group on a cluster, all at
    /// the first group's `now`.
    pub async fn peek(&self, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64) -> Result<(i64, Vec<Verdict>)> {
        self.with_connection(|generation, mut connection| async move {
            let mut tags: Vec<Option<&str>> = match *self.target {
                Target::Cluster(_) => checks.iter().map(hash_tag).collect(),
                _ => vec![None],
            };
            tags.sort_unstable();
            tags.dedup();
            if let [_] = tags.as_slice() {
                return self
                    .decide_in_one_slot(generation, &mut connection, checks, now, cost, true)
                    .await;
            }
            let mut verdicts: Vec<Option<Verdict>> = vec![None; checks.len()];
            let mut store_now = now;
            for tag in tags {
                let members: Vec<usize> = (0..checks.len()).filter(|&i| hash_tag(&checks[i]) == tag).collect();
                let group: Vec<RedisCheck<'_>> = members.iter().map(|&i| checks[i]).collect();
                let (n, decided) = self
                    .decide_in_one_slot(generation, &mut connection, &group, store_now, cost, true)
                    .await?;
                store_now.get_or_insert(n);
                for (&i, verdict) in members.iter().zip(decided) {
                    verdicts[i] = Some(verdict);
                }
            }
            let verdicts = verdicts
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::Internal("a check was left out of every slot group".into()))?;
            Ok((store_now.unwrap_or_default(), verdicts))
        })
        .await
    }

    /// Checks whose keys live in different cluster slots, grouped by slot
    /// (hash tag) and taken in tag order: every group is first decided
    /// without charging anything (peek). When all allow, each group is then
    /// decided and charged in the same order; when one denies, only the
    /// denying groups are decided again, so their penalties record the
    /// denial, and nothing is charged anywhere, as on a single server. All
    /// groups decide at the first group's `now`. Between the peek and the
    /// charge another request may take what the peek saw: when a group then
    /// denies in the charge pass, the groups charged before it are refunded
    /// ([`crate::algorithm::refund`]) and the later ones are not charged, so
    /// the request is denied with nothing charged. The other way round, a
    /// denying group may allow when decided again (freed in between): it is
    /// refunded at once and keeps its peek verdicts, so the request stays
    /// denied, and concurrency leases are released, never left behind.
    ///
    /// Every pass runs within the check's one deadline. The groups charged
    /// so far are kept in `record` until the decision finishes: when it
    /// stops half-way (the deadline passed, a call failed), the caller gives
    /// them back. Only the one call in flight at that moment stays unknown
    /// (a paused server may still run it when it resumes).
    async fn decide_across_slots(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        record: &ChargedGroups,
    ) -> Result<(i64, Vec<Verdict>)> {
        let mut groups: Vec<(Option<&str>, Vec<usize>)> = Vec::new();
        for (i, check) in checks.iter().enumerate() {
            match groups.iter_mut().find(|(tag, _)| *tag == hash_tag(check)) {
                Some((_, members)) => members.push(i),
                None => groups.push((hash_tag(check), vec![i])),
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        fn denies(decided: &[Verdict], group: &[RedisCheck<'_>]) -> bool {
            decided.iter().zip(group).any(|(v, c)| !v.allowed && !c.shadow)
        }
        let mut verdicts: Vec<Option<Verdict>> = vec![None; checks.len()];
        let mut store_now = now;
        let mut denying = Vec::new();
        let mut charged: Vec<Vec<RedisCheck<'_>>> = Vec::new();
        for pass in [Pass::Peek, Pass::Charge] {
            if pass == Pass::Charge {
                let hook = self.between_passes.lock().clone();
                if let Some(hook) = hook {
                    hook();
                }
            }
            for (g, (_, members)) in groups.iter().enumerate() {
                if pass == Pass::Charge && !denying.is_empty() && !denying.contains(&g) {
                    continue;
                }
                let group: Vec<RedisCheck<'_>> = members.iter().map(|&i| checks[i]).collect();
                let (n, decided) = self
                    .decide_in_one_slot(generation, connection, &group, store_now, cost, pass == Pass::Peek)
                    .await?;
                let at = *store_now.get_or_insert(n);
                let denied = denies(&decided, &group);
                if pass == Pass::Charge && !denying.is_empty() && !denied {
                    // A group that denied in the peek allows now (freed
                    // between the passes) and was charged, for a request
                    // that stays denied: give that back, keep the peek's
                    // verdicts.
                    self.refund_in_one_slot(generation, connection, &group, at, cost)
                        .await?;
                    continue;
                }
                for (&i, verdict) in members.iter().zip(decided) {
                    verdicts[i] = Some(verdict);
                }
                match pass {
                    Pass::Peek if denied => denying.push(g),
                    Pass::Charge if denying.is_empty() && denied => {
                        // Taken between the passes: give back what the
                        // earlier groups were charged, charge no later one.
                        // Forgotten first: a refund cut short is not sent
                        // twice (never more given back than was charged).
                        *record.lock() = None;
                        for group in &charged {
                            self.refund_in_one_slot(generation, connection, group, at, cost).await?;
                        }
                        break;
                    }
                    Pass::Charge if denying.is_empty() => {
                        let mut record = record.lock();
                        record.get_or_insert_with(|| (at, Vec::new())).1.extend(members);
                        charged.push(group);
                    }
                    _ => {}
                }
            }
        }
        // Finished: what stays charged is the admitted request's.
        *record.lock() = None;
        let verdicts = verdicts
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal("a check was left out of every slot group".into()))?;
        Ok((store_now.unwrap_or_default(), verdicts))
    }

    /// Gives back admissions of `cost` at `now` for `checks`, one call per
    /// slot on a cluster; `charged[n]`: which state the admission of
    /// `checks[n]` charged. Returns how many checks' charges were given back.
    pub async fn refund(&self, checks: &[RedisCheck<'_>], charged: &[Charged], now: i64, cost: i64) -> Result<usize> {
        self.with_connection(|generation, mut connection| async move {
            let mut tags: Vec<Option<&str>> = checks.iter().map(hash_tag).collect();
            tags.sort_unstable();
            tags.dedup();
            let mut refunded = 0;
            for tag in tags {
                let (group, charged): (Vec<RedisCheck<'_>>, Vec<Charged>) = checks
                    .iter()
                    .zip(charged.iter().copied().chain(std::iter::repeat(Charged::Now)))
                    .filter(|(c, _)| hash_tag(c) == tag)
                    .map(|(c, charged)| (*c, charged))
                    .unzip();
                refunded += self
                    .refund_charged(generation, &mut connection, &group, &charged, now, cost)
                    .await?;
            }
            Ok(refunded)
        })
        .await
    }

    /// EVALSHA of the refund script (EVAL when the server lost it) for
    /// checks whose keys share one slot, right after their admission: each
    /// goes back to the state in force at `now`.
    async fn refund_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: i64,
        cost: i64,
    ) -> Result<usize> {
        self.refund_charged(generation, connection, checks, &[], now, cost)
            .await
    }

    /// [`RedisStore::refund_in_one_slot`], each check's admission having
    /// charged the state `charged` names.
    async fn refund_charged(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        charged: &[Charged],
        now: i64,
        cost: i64,
    ) -> Result<usize> {
        // A lease is given back by releasing it (and a concurrency key holds
        // no cells for the refund script to read).
        let charged_of = |n: usize| charged.get(n).copied().unwrap_or(Charged::Now);
        let concurrency = |c: &RedisCheck<'_>| c.params.kind == Kind::Concurrency;
        let leases: Vec<RedisCheck<'_>> = checks
            .iter()
            .filter(|c| concurrency(c) && c.lease.is_some())
            .copied()
            .collect();
        let (checks, charged): (Vec<RedisCheck<'_>>, Vec<Charged>) = checks
            .iter()
            .enumerate()
            .filter(|(_, c)| !concurrency(c))
            .map(|(n, c)| (*c, charged_of(n)))
            .unzip();
        let mut refunded = 0;
        if !leases.is_empty() {
            refunded += self
                .release_in_one_slot(generation, connection, &leases, Some(now))
                .await?;
        }
        if checks.is_empty() {
            return Ok(refunded);
        }
        let reply: Result<i64, RedisError> = Self::eval(connection, &self.refund_sha, REFUND_SCRIPT, |cmd| {
            push_refund_args(cmd, &checks, &charged, now, cost)
        })
        .await;
        reply
            .map(|n| refunded + n.max(0) as usize)
            .map_err(|e| self.call_failed(generation, &checks, e))
    }

    /// Releases the leases of `checks` (their `lease`), one call per slot on
    /// a cluster. Returns how many were live at `now` (the server's `TIME`
    /// when `None`).
    pub async fn release(&self, checks: &[RedisCheck<'_>], now: Option<i64>) -> Result<usize> {
        self.with_connection(|generation, mut connection| async move {
            let mut tags: Vec<Option<&str>> = checks.iter().map(hash_tag).collect();
            tags.sort_unstable();
            tags.dedup();
            let mut released = 0;
            for tag in tags {
                let group: Vec<RedisCheck<'_>> = checks.iter().filter(|c| hash_tag(c) == tag).copied().collect();
                released += self
                    .release_in_one_slot(generation, &mut connection, &group, now)
                    .await?;
            }
            Ok(released)
        })
        .await
    }

    /// EVALSHA of the release script (EVAL when the server lost it) for
    /// leases whose keys share one slot.
    async fn release_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
    ) -> Result<usize> {
        let reply: Result<i64, RedisError> = Self::eval(connection, &self.release_sha, RELEASE_SCRIPT, |cmd| {
            cmd.arg(checks.len());
            for check in checks {
                cmd.arg(check.keys[0].as_str());
            }
            match now {
                Some(now) => cmd.arg(now),
                None => cmd.arg(""),
            };
            for check in checks {
                cmd.arg(check.lease.unwrap_or("")).arg(check.params.burst);
            }
        })
        .await;
        reply
            .map(|n| n.max(0) as usize)
            .map_err(|e| self.call_failed(generation, checks, e))
    }

    /// Test hook: `hook` runs between the peek and the charge pass of every
    /// cross-slot decision.
    pub(crate) fn set_between_passes(&self, hook: Option<BetweenPasses>) {
        *self.between_passes.lock() = hook;
    }

    async fn decide_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<(i64, Vec<Verdict>)> {
        let mut reply = Err(RedisError::from((ErrorKind::Client, "no call made")));
        if self.functions.load(Ordering::Relaxed) {
            reply = self.call_function(connection, checks, now, cost, peek).await;
            if matches!(&reply, Err(e) if functions_unusable(e)) {
                self.functions.store(false, Ordering::Relaxed);
            }
        }
        if !self.functions.load(Ordering::Relaxed) {
            reply = self.call_script(connection, checks, now, cost, peek).await;
        }
        let values = reply.map_err(|e| self.call_failed(generation, checks, e))?;
        parse_reply(&values, checks.len())
    }

    /// The error of a failed call for `checks`: foreign data on one of their
    /// keys reaches the caller; anything else is the store failing, and the
    /// connection is dropped so the next call reconnects.
    fn call_failed(&self, generation: u64, checks: &[RedisCheck<'_>], e: RedisError) -> Error {
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
    }

    /// EVALSHA of a script, EVAL of its `source` when the server lost its
    /// script cache (a restart, SCRIPT FLUSH, a replica just promoted).
    async fn eval<T: FromRedisValue>(
        connection: &mut Connection,
        sha: &str,
        source: &str,
        args: impl Fn(&mut Cmd),
    ) -> Result<T, RedisError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha);
        args(&mut cmd);
        let reply = Self::query(connection, &cmd).await;
        if !matches!(&reply, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            return reply;
        }
        let mut eval = redis::cmd("EVAL");
        eval.arg(source);
        args(&mut eval);
        Self::query(connection, &eval).await
    }

    /// FCALL of the library's function, loading the library when the server
    /// does not have it (first use, a restart without persistence, FUNCTION FLUSH).
    async fn call_function(
        &self,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<Vec<i64>, RedisError> {
        let library = library();
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&library.function);
        push_args(&mut cmd, checks, now, cost, peek);
        let reply = Self::query(connection, &cmd).await;
        if !matches!(&reply, Err(e) if e.code() == Some("ERR") && e.detail().is_some_and(|d| d.starts_with("Function not found")))
        {
            return reply;
        }
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&library.code);
        Self::query::<String>(connection, &load).await?;
        Self::query(connection, &cmd).await
    }

    /// EVALSHA of the script, EVAL when the server lost its script cache.
    async fn call_script(
        &self,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<Vec<i64>, RedisError> {
        Self::eval(connection, &self.sha, SCRIPT, |cmd| {
            push_args(cmd, checks, now, cost, peek)
        })
        .await
    }

    /// Whether `key` exists: a plain `EXISTS`, not a script, so it never
    /// counts as a decision's call.
    pub(crate) async fn exists(&self, key: &str) -> Result<bool> {
        self.with_connection(|generation, mut connection| async move {
            let mut cmd = redis::cmd("EXISTS");
            cmd.arg(key);
            let reply: Result<i64, RedisError> = Self::query(&mut connection, &cmd).await;
            reply.map(|n| n > 0).map_err(|e| {
                self.forget(generation);
                unavailable(e)
            })
        })
        .await
    }

    /// Runs a script over `keys` (of one slot) and `args`: EVALSHA, EVAL
    /// when the server lost it. Per-key overrides use it.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        sha: &str,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<T> {
        self.with_connection(|generation, mut connection| async move {
            let reply: Result<T, RedisError> = Self::eval(&mut connection, sha, source, |cmd| {
                cmd.arg(keys.len()).arg(keys).arg(args);
            })
            .await;
            reply.map_err(|e| {
                self.forget(generation);
                unavailable(e)
            })
        })
        .await
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

impl Drop for RedisStore {
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

/// `numkeys key... now cost (kind count period burst max_delay flags
/// threshold within forget_after cooldowns lease adaptive)...`; flags: 1 shadow, 2 peek.
/// One policy without a penalty or an adaptive spec goes in the short form
/// check.lua reads: `numkeys key... now cost kind count period burst max_delay flags lease`.
fn push_args(cmd: &mut Cmd, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64, peek: bool) {
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
    if let [check] = checks {
        let p = check.params;
        if check.penalty.is_none() && p.adaptive.is_none() {
            cmd.arg(p.kind as i64)
                .arg(p.count)
                .arg(p.period)
                .arg(p.burst)
                .arg(p.max_delay)
                .arg(check.shadow as i64 | (peek as i64) << 1 | (check.overrides as i64) << 2)
                .arg(check.lease.unwrap_or(""));
            return;
        }
    }
    for check in checks {
        let p = check.params;
        cmd.arg(p.kind as i64)
            .arg(p.count)
            .arg(p.period)
            .arg(p.burst)
            .arg(p.max_delay)
            .arg(check.shadow as i64 | (peek as i64) << 1 | (check.overrides as i64) << 2);
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
        cmd.arg(check.lease.unwrap_or(""));
        match &p.adaptive {
            Some(a) => cmd.arg(a.arg()),
            None => cmd.arg(""),
        };
    }
}

/// `numkeys key... now cost (kind count period burst flags)...`: the refund
/// script's arguments; a policy's state keys and, with overrides, its
/// override keys ([`KeyLayout::refund_keys`]). Flags: 4 overrides, then
/// which state the admission charged ([`Charged`]): 8 an override's, 16 the
/// policy's own (neither: whichever is in force at `now`).
fn push_refund_args(cmd: &mut Cmd, checks: &[RedisCheck<'_>], charged: &[Charged], now: i64, cost: i64) {
    let keys = |c: &RedisCheck<'_>| {
        let layout = KeyLayout::of(c);
        debug_assert_eq!(c.keys.len(), layout.len(), "the keys of a check follow its layout");
        layout.refund_keys(c.keys).count()
    };
    cmd.arg(checks.iter().map(keys).sum::<usize>());
    for check in checks {
        for key in KeyLayout::of(check).refund_keys(check.keys) {
            cmd.arg(key.as_str());
        }
    }
    cmd.arg(now).arg(cost);
    for (n, check) in checks.iter().enumerate() {
        let p = check.params;
        let charged = match charged.get(n).copied().unwrap_or(Charged::Now) {
            Charged::Now => 0,
            Charged::Override => 8,
            Charged::Base => 16,
        };
        cmd.arg(p.kind as i64)
            .arg(p.count)
            .arg(p.period)
            .arg(p.burst)
            .arg((check.overrides as i64) << 2 | charged);
    }
}

/// Errors caused by one key's contents (someone SET it, or its state is not
/// ours), as opposed to the store being unable to decide. Only these reach
/// the caller; anything else (OOM, READONLY, MASTERDOWN, BUSY, LOADING,
/// CROSSSLOT, TRYAGAIN, a second NOSCRIPT, a script error) is a store failure
/// that feeds the breaker and the fallback.
/// The hash tag of a check's keys (they share one): its cluster slot.
fn hash_tag<'k>(check: &RedisCheck<'k>) -> Option<&'k str> {
    check.keys[0].rsplit_once('{').map(|(_, tag)| tag)
}

/// The two passes of [`RedisStore::decide_across_slots`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Peek,
    Charge,
}

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

/// The server cannot run polylimit's function: Redis < 7 has no FCALL or
/// FUNCTION (`ERR unknown command`), or an ACL refuses them (`NOPERM`).
fn functions_unusable(e: &RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e.detail().is_some_and(|d| d.starts_with("unknown command")),
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
    // With overrides, three values per check follow: the override's numbers;
    // then, when a policy is adaptive, four per check (adaptive.lua).
    let extra = values.len().saturating_sub(2 + 6 * checks);
    let (overrides, adaptive) = match extra {
        0 => (false, false),
        e if e == 3 * checks => (true, false),
        e if e == 4 * checks => (false, true),
        e if e == 7 * checks => (true, true),
        _ => (false, false),
    };
    if values.len() != 2 + 6 * checks + 3 * checks * overrides as usize + 4 * checks * adaptive as usize {
        return Err(Error::Internal(format!(
            "decision script returned {} values for {checks} policies",
            values.len()
        )));
    }
    let tail = values.get(2 + 6 * checks..).unwrap_or_default();
    let overridden = |i: usize| {
        tail.get(3 * i..3 * i + 3)
            .filter(|o| overrides && o[2] > 0)
            .map(|o| [o[0] as u64, o[1] as u64, o[2] as u64])
    };
    let adaptive_tail = values
        .get(2 + 6 * checks + 3 * checks * overrides as usize..)
        .unwrap_or_default();
    let report = |i: usize, denied: bool| {
        adaptive_tail
            .get(4 * i..4 * i + 4)
            .filter(|a| adaptive && a[0] >= 0)
            .map(|a| crate::algorithm::adaptive::report_from_reply(a, denied))
    };
    let verdicts = values[2..2 + 6 * checks]
        .chunks_exact(6)
        .enumerate()
        .map(|(i, v)| Verdict {
            allowed: v[0] == 1,
            remaining: v[1].max(0) as u64,
            reset_after_ms: v[2].max(0) as u64,
            retry_after_ms: (v[3] >= 0).then_some(v[3] as u64),
            delay_ms: v[4].max(0) as u64,
            penalized: v[5] == 1,
            overridden: overridden(i),
            adaptive: report(i, v[5] == 2),
        })
        .collect();
    Ok((values[1], verdicts))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{is_key_error_reply, RedisStore, Timeouts};

    /// A store on a listener that never answers: calls give up after 20 ms,
    /// a connect would go on for 30 s.
    fn silent_store() -> (std::net::TcpListener, RedisStore) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://127.0.0.1:{}", silent.local_addr().unwrap().port());
        let timeouts = Timeouts {
            call: Duration::from_millis(20),
            connect: Duration::from_secs(30),
        };
        (silent, RedisStore::open(&url, timeouts, None).unwrap())
    }

    // A listener that never accepts: the kernel completes the TCP handshake,
    // nothing answers Redis's. The call gives up after its timeout; the
    // connect goes on until the store is dropped, and not after.
    #[tokio::test]
    async fn a_connect_in_flight_ends_with_its_store() {
        let (_silent, store) = silent_store();
        assert!(store.delete(&["k".to_string()]).await.is_err());
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
        let attempt = |store: &RedisStore| store.shared.slot.lock().attempt.as_ref().map(|a| a.id);
        assert!(runtime().block_on(store.delete(&["k".to_string()])).is_err());
        assert_eq!(attempt(&store), Some(1));
        assert!(runtime().block_on(store.delete(&["k".to_string()])).is_err());
        assert_eq!(attempt(&store), Some(2), "a new attempt on the new runtime");
    }

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
