//! Script loading: the decision code as a Redis 7 function library or a
//! script, the refund and release scripts, and the calls that run them
//! (FCALL, EVALSHA, EVAL when the server lost them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

use super::args::push_args;
use super::args::push_refund_args;
use super::args::{push_shape_args, RedisCheck, Shape};
use super::clock::Now;
use super::connection::{unavailable, Connection, Connector};
use super::reply::{parse_reply, parse_shape_reply};
use super::state::RedisStore;
use crate::algorithm::{Kind, Verdict};
use crate::error::Result;
use crate::store::overrides::Charged;

/// The algorithm functions of the decision code.
macro_rules! algorithms {
    () => {
        concat!(
            include_str!("../../../lua/common.lua"),
            include_str!("../../../lua/token_bucket.lua"),
            include_str!("../../../lua/gcra.lua"),
            include_str!("../../../lua/leaky_bucket.lua"),
            include_str!("../../../lua/fixed_window.lua"),
            include_str!("../../../lua/sliding_window_counter.lua"),
            include_str!("../../../lua/sliding_window_log.lua"),
            include_str!("../../../lua/concurrency.lua"),
            include_str!("../../../lua/penalty.lua"),
            include_str!("../../../lua/overrides.lua"),
            include_str!("../../../lua/adaptive.lua"),
            include_str!("../../../lua/dispatch.lua"),
        )
    };
}

/// The dispatcher: one decision over `KEYS` and `ARGV`.
const CHECK: &str = include_str!("../../../lua/check.lua");

/// The common shapes' functions (library only): see [`Shape`].
const SHAPES: &str = include_str!("../../../lua/shapes.lua");

/// The decision script: the algorithm functions then the dispatcher.
pub const SCRIPT: &str = concat!(algorithms!(), include_str!("../../../lua/check.lua"));

/// The refund script: gives back what admissions charged (used when a
/// cross-slot decision denies after earlier slots were charged). Separate
/// from [`SCRIPT`], so the decision path is unchanged; always a script.
pub(crate) const REFUND_SCRIPT: &str = concat!(
    include_str!("../../../lua/common.lua"),
    include_str!("../../../lua/overrides.lua"),
    include_str!("../../../lua/refund.lua")
);

/// The release script: removes concurrency leases. Always a script.
pub(crate) const RELEASE_SCRIPT: &str = concat!(
    include_str!("../../../lua/common.lua"),
    include_str!("../../../lua/concurrency.lua"),
    include_str!("../../../lua/release.lua")
);

/// The SHA1 of [`SCRIPT`], as EVALSHA wants it.
pub fn script_sha() -> String {
    redis::Script::new(SCRIPT).get_hash().to_string()
}

/// The SHA1s EVALSHA calls the scripts by, computed once.
static CHECK_SHA: LazyLock<String> = LazyLock::new(script_sha);
static REFUND_SHA: LazyLock<String> = LazyLock::new(|| redis::Script::new(REFUND_SCRIPT).get_hash().to_string());
static RELEASE_SHA: LazyLock<String> = LazyLock::new(|| redis::Script::new(RELEASE_SCRIPT).get_hash().to_string());

/// The decision code as a Redis 7 function library. Its top level (every
/// algorithm's function) runs once, when the library loads; a script runs
/// it on every call. Library and function are named after the SHA1 of the
/// code, so processes running different polylimit versions on one Redis each
/// call their own. Beside the general check it registers one function per
/// common `Shape`, named `<function>_<shape>`.
pub struct Library {
    /// The name of the library and of its general check function, for FCALL.
    pub function: String,
    /// The source, for FUNCTION LOAD.
    pub code: String,
    /// The shape functions' names, in [`Shape::ALL`]'s order.
    shapes: [String; 3],
}

impl Library {
    /// The name of `shape`'s function.
    pub(super) fn shape_function(&self, shape: Shape) -> &str {
        &self.shapes[shape as usize]
    }
}

/// The decision library ([`Library`]).
pub fn library() -> &'static Library {
    static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
        let body = format!(
            "{}\nlocal function check(KEYS, ARGV)\n{CHECK}\nend\n{SHAPES}",
            algorithms!()
        );
        let function = format!("polylimit_{}", &redis::Script::new(&body).get_hash()[..16]);
        let shapes = Shape::ALL.map(|shape| format!("{function}_{}", shape.suffix()));
        let mut code = format!("#!lua name={function}\n{body}\nredis.register_function('{function}', check)\n");
        for shape in Shape::ALL {
            let suffix = shape.suffix();
            code += &format!("redis.register_function('{function}_{suffix}', check_{suffix})\n");
        }
        Library { function, code, shapes }
    });
    &LIBRARY
}

/// Test switch: every decision takes the general check, so the vectors can
/// pin it for the shapes too ([`general_check_only`]).
static GENERAL_ONLY: AtomicBool = AtomicBool::new(false);

/// For tests: `true` sends every Redis decision through the general check,
/// even those a shape function would decide; `false` (the default) restores
/// the shape functions.
#[doc(hidden)]
pub fn general_check_only(on: bool) {
    GENERAL_ONLY.store(on, Ordering::Relaxed);
}

/// Whether [`general_check_only`] is on.
pub(super) fn general_only() -> bool {
    GENERAL_ONLY.load(Ordering::Relaxed)
}

impl RedisStore {
    pub(super) async fn decide_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<(i64, Vec<Verdict>)> {
        let mut reply: Result<Value, RedisError> = Err(RedisError::from((ErrorKind::Client, "no call made")));
        // Scripts (Redis < 7, Cluster) always run the general check.
        let mut shape = Shape::of(checks, peek).filter(|_| !GENERAL_ONLY.load(Ordering::Relaxed));
        // A function call sends the estimate of the server's clock (the
        // caller's `now` wins), or samples it (`sent`: when); scripts read TIME.
        let mut sent = None;
        let mut estimate = now;
        if self.functions.load(Ordering::Relaxed) {
            estimate = match now {
                Some(now) => Some(now),
                None => {
                    let local = self.clock.local_us();
                    match self.clock.now(generation, local) {
                        Now::Estimate(ms) => Some(ms),
                        Now::Sample => {
                            sent = Some(local);
                            None
                        }
                    }
                }
            };
            reply = self
                .call_function(connection, checks, shape, estimate, cost, peek)
                .await;
            if shape.is_some() && matches!(&reply, Err(e) if state_unreadable_fast(e)) {
                // The fast path reads a fixed window's integer unchecked; the
                // general check reads the same key and names what it holds.
                shape = None;
                reply = self.call_function(connection, checks, None, estimate, cost, peek).await;
            }
            if matches!(&reply, Err(e) if functions_unusable(e)) {
                self.functions.store(false, Ordering::Relaxed);
            }
        }
        if !self.functions.load(Ordering::Relaxed) {
            reply = self.call_script(connection, checks, now, cost, peek).await;
        }
        let value = reply.map_err(|e| self.call_failed(generation, checks, e))?;
        let decided = match shape {
            Some(_) if self.functions.load(Ordering::Relaxed) => parse_shape_reply(value, &checks[0], estimate, cost)?,
            _ => {
                let values: Vec<i64> = redis::from_redis_value(value)
                    .map_err(|e| crate::error::Error::Internal(format!("decision script: {e}")))?;
                parse_reply(&values, checks.len())?
            }
        };
        if let Some(sent) = sent {
            self.clock.record(generation, sent, self.clock.local_us(), decided.0);
        }
        Ok(decided)
    }

    /// [`RedisStore::refund_in_one_slot`], each check's admission having
    /// charged the state `charged` names.
    pub(super) async fn refund_charged(
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
        let reply: Result<i64, RedisError> = Self::eval(connection, &REFUND_SHA, REFUND_SCRIPT, |cmd| {
            push_refund_args(cmd, &checks, &charged, now, cost)
        })
        .await;
        reply
            .map(|n| refunded + n.max(0) as usize)
            .map_err(|e| self.call_failed(generation, &checks, e))
    }

    /// EVALSHA of the release script (EVAL when the server lost it) for
    /// leases whose keys share one slot.
    pub(super) async fn release_in_one_slot(
        &self,
        generation: u64,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
    ) -> Result<usize> {
        let reply: Result<i64, RedisError> = Self::eval(connection, &RELEASE_SHA, RELEASE_SCRIPT, |cmd| {
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
        let reply = Connector::query(connection, &cmd).await;
        if !matches!(&reply, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            return reply;
        }
        let mut eval = redis::cmd("EVAL");
        eval.arg(source);
        args(&mut eval);
        Connector::query(connection, &eval).await
    }

    /// FCALL of the library's function (`shape`'s, or the general check),
    /// loading the library when the server does not have it (first use, a
    /// restart without persistence, FUNCTION FLUSH).
    async fn call_function(
        &self,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        shape: Option<Shape>,
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<Value, RedisError> {
        let library = library();
        let mut cmd = redis::cmd("FCALL");
        match shape {
            Some(shape) => {
                cmd.arg(library.shape_function(shape));
                push_shape_args(&mut cmd, shape, &checks[0], now, cost);
            }
            None => {
                cmd.arg(&library.function);
                push_args(&mut cmd, checks, now, cost, peek);
            }
        }
        let reply = Connector::query(connection, &cmd).await;
        if !matches!(&reply, Err(e) if e.code() == Some("ERR") && e.detail().is_some_and(|d| d.starts_with("Function not found")))
        {
            return reply;
        }
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&library.code);
        Connector::query::<String>(connection, &load).await?;
        Connector::query(connection, &cmd).await
    }

    /// EVALSHA of the script, EVAL when the server lost its script cache.
    async fn call_script(
        &self,
        connection: &mut Connection,
        checks: &[RedisCheck<'_>],
        now: Option<i64>,
        cost: i64,
        peek: bool,
    ) -> Result<Value, RedisError> {
        Self::eval(connection, &CHECK_SHA, SCRIPT, |cmd| {
            push_args(cmd, checks, now, cost, peek)
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
        self.link
            .with_connection(|generation, mut connection| async move {
                let reply: Result<T, RedisError> = Self::eval(&mut connection, sha, source, |cmd| {
                    cmd.arg(keys.len()).arg(keys).arg(args);
                })
                .await;
                reply.map_err(|e| {
                    self.link.forget(generation);
                    unavailable(e)
                })
            })
            .await
    }
}

/// A shape function that hit a value it cannot do arithmetic on (a foreign
/// value under a fixed window's key).
fn state_unreadable_fast(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("attempt to perform arithmetic"))
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
