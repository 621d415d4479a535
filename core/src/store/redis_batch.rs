//! Auto-batching of the Redis decisions of one connection: decisions waiting
//! at the same moment go to the server as ONE call of the library's batch
//! function (core/lua/batch.lua), which runs each through the same `check`
//! with its own keys and arguments, under pcall, and returns one reply per
//! decision. redis-server's one thread is what bounds a busy limiter, and
//! most of an FCALL's cost there (parsing the command, setting up the call,
//! the reply) is paid once per batch instead of once per decision.
//!
//! Nothing waits for company: a decision that finds nothing queued schedules
//! a sending task at once, and that task sends whatever is queued when it
//! runs (the decisions handed over in the meantime, e.g. one JS turn's
//! checks from Node). Several batches may be in flight on the multiplexed
//! connection. A batch of one is the plain FCALL of `check`.
//!
//! Each decision keeps its own guarantees: it is atomic (a batch runs as one
//! function call, so even more so), its timeout and the breaker are the
//! caller's, an error raised by one decision fails only that one, and an
//! error of the whole call (connection lost, OOM, the library missing) is
//! every decision's own error. A caller that gives up (timeout, cancelled)
//! before its decision is sent is left out of the batch and charged
//! nothing; once sent, its decision is decided and charged, as a sent FCALL
//! always was.
//!
//! Used for single servers and Sentinel (the function path). Cluster
//! decisions are scripts (EVALSHA) and are not batched, nor are they where
//! functions are missing.

use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Value};
use std::sync::Arc;
use tokio::sync::oneshot;

use super::redis::library;

/// The most decisions in one call: a batch runs atomically and holds the
/// server for its whole length; more waiting go in further calls, pipelined.
const MAX_BATCH: usize = 64;

type Reply = Result<Vec<i64>, RedisError>;

/// One decision waiting to be sent.
struct Pending {
    /// The connection's generation (decisions of different connections
    /// never share a call) and the connection.
    generation: u64,
    connection: MultiplexedConnection,
    /// How many of `args`, after the key count, are keys.
    keys: usize,
    /// `numkeys key... arg...`, as the FCALL of `check` takes them.
    args: Cmd,
    reply: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct Queue {
    /// The process the queue belongs to: a forked child inherits the
    /// parent's queue, but not the task that would send it.
    pid: u32,
    pending: Vec<Pending>,
    /// The sending task scheduled and not yet run.
    scheduled: Option<u64>,
    tasks: u64,
}

/// The decisions of one store waiting to be sent.
#[derive(Default)]
pub(crate) struct Batcher {
    queue: Arc<Mutex<Queue>>,
}

impl Batcher {
    /// Decides `args` (`numkeys key... arg...` of `check`, `keys` of them
    /// keys) with the next batch on `connection`. The caller's own timeout
    /// bounds the wait; `timeout` bounds the batch's call.
    pub(crate) async fn call(
        &self,
        generation: u64,
        connection: MultiplexedConnection,
        keys: usize,
        args: Cmd,
        timeout: Duration,
    ) -> Reply {
        let (reply, answer) = oneshot::channel();
        let task = {
            let mut queue = self.queue.lock();
            let pid = std::process::id();
            if queue.pid != pid {
                queue.pid = pid;
                queue.pending.clear();
                queue.scheduled = None;
            }
            queue.pending.push(Pending {
                generation,
                connection,
                keys,
                args,
                reply,
            });
            match queue.scheduled {
                Some(_) => None,
                None => {
                    queue.tasks += 1;
                    queue.scheduled = Some(queue.tasks);
                    queue.scheduled
                }
            }
        };
        if let Some(id) = task {
            let drain = Drain {
                queue: self.queue.clone(),
                id,
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(drain.send(timeout));
                }
                Err(_) => drain.send(timeout).await,
            }
        }
        answer
            .await
            .unwrap_or_else(|_| Err(RedisError::from((ErrorKind::Client, "the batch ended without a reply"))))
    }
}

/// The sending task of one drain of the queue. Dropped without running (its
/// runtime shut down), it unschedules itself and drops what was queued, so
/// those callers fail at once and the next decision schedules a new task.
struct Drain {
    queue: Arc<Mutex<Queue>>,
    id: u64,
}

impl Drop for Drain {
    fn drop(&mut self) {
        let mut queue = self.queue.lock();
        if queue.scheduled == Some(self.id) {
            queue.scheduled = None;
            queue.pending.clear();
        }
    }
}

impl Drain {
    /// Sends everything queued: one call per connection and per
    /// [`MAX_BATCH`] decisions, all in flight together.
    async fn send(self, timeout: Duration) {
        let pending = {
            let mut queue = self.queue.lock();
            queue.scheduled = None;
            std::mem::take(&mut queue.pending)
        };
        drop(self);
        // Callers that gave up before the send are left out.
        let mut pending: Vec<Pending> = pending.into_iter().filter(|p| !p.reply.is_closed()).collect();
        let mut batches = Vec::new();
        while let Some(first) = pending.first() {
            let generation = first.generation;
            let (mut same, rest): (Vec<Pending>, Vec<Pending>) =
                pending.into_iter().partition(|p| p.generation == generation);
            pending = rest;
            while same.len() > MAX_BATCH {
                let tail = same.split_off(MAX_BATCH);
                batches.push(std::mem::replace(&mut same, tail));
            }
            batches.push(same);
        }
        let last = batches.pop();
        for batch in batches {
            tokio::spawn(run(batch, timeout));
        }
        if let Some(batch) = last {
            run(batch, timeout).await;
        }
    }
}

/// Sends one batch and hands each caller its reply.
async fn run(batch: Vec<Pending>, timeout: Duration) {
    let library = library();
    let mut connection = batch[0].connection.clone();
    let mut cmd = redis::cmd("FCALL");
    if let [one] = batch.as_slice() {
        cmd.arg(&library.function);
        for arg in one.args.args_iter() {
            push(&mut cmd, arg);
        }
    } else {
        cmd.arg(&library.batch).arg(batch.iter().map(|p| p.keys).sum::<usize>());
        for p in &batch {
            for arg in p.args.args_iter().skip(1).take(p.keys) {
                push(&mut cmd, arg);
            }
        }
        for p in &batch {
            cmd.arg(p.keys).arg(p.args.args_iter().len() - 1 - p.keys);
            for arg in p.args.args_iter().skip(1 + p.keys) {
                push(&mut cmd, arg);
            }
        }
    }
    let reply = match tokio::time::timeout(timeout, fcall(&mut connection, &cmd)).await {
        Ok(reply) => reply,
        Err(_) => Err(RedisError::from((ErrorKind::Io, "no reply within the timeout"))),
    };
    let replies: Vec<Reply> = match reply {
        Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        Ok(value) if batch.len() == 1 => vec![decode(value)],
        Ok(Value::Array(values)) if values.len() == batch.len() => values.into_iter().map(decode).collect(),
        Ok(other) => {
            let e = RedisError::from((
                ErrorKind::Client,
                "the batch function's reply does not match its decisions",
                format!("{other:?}"),
            ));
            batch.iter().map(|_| Err(e.clone())).collect()
        }
    };
    for (pending, reply) in batch.into_iter().zip(replies) {
        // The caller may have given up since: nobody to tell.
        let _ = pending.reply.send(reply);
    }
}

fn push(cmd: &mut Cmd, arg: redis::Arg<&[u8]>) {
    if let redis::Arg::Simple(bytes) = arg {
        cmd.arg(bytes);
    }
}

/// One decision's reply: its values, or the error it raised.
fn decode(value: Value) -> Reply {
    match value {
        Value::ServerError(e) => Err(e.into()),
        value => Ok(Vec::<i64>::from_redis_value(value)?),
    }
}

/// FCALL, loading the library when the server does not have it (first use,
/// a restart without persistence, FUNCTION FLUSH) and calling again. The
/// raw reply: a batch's array holds each decision's error in its place.
async fn fcall(connection: &mut MultiplexedConnection, cmd: &Cmd) -> Result<Value, RedisError> {
    let reply = raw(connection, cmd).await;
    if !matches!(&reply, Err(e) if e.code() == Some("ERR") && e.detail().is_some_and(|d| d.starts_with("Function not found")))
    {
        return reply;
    }
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg("REPLACE").arg(&library().code);
    load.query_async::<String>(connection).await?;
    raw(connection, cmd).await
}

async fn raw(connection: &mut MultiplexedConnection, cmd: &Cmd) -> Result<Value, RedisError> {
    match connection.req_packed_command(cmd).await? {
        Value::ServerError(e) => Err(e.into()),
        value => Ok(value),
    }
}
