//! The Redis store: one atomic call per decision over one shared,
//! multiplexed connection (or a cluster connection). On Redis 7 the decision
//! is a function (FCALL of a library loaded once, reloaded when the server
//! lost it); where functions are missing or not permitted, and on Cluster,
//! the same code runs as a script (EVALSHA, EVAL when the server lost its
//! script cache).

mod args;
mod clock;
mod connection;
mod cross_slot;
mod reply;
mod sans_io;
mod scripts;
mod state;

use redis::RedisError;

use crate::algorithm::Verdict;
use crate::error::{Error, Result};
use crate::store::overrides::Charged;
pub(crate) use args::{KeyLayout, RedisCheck};
pub(crate) use connection::Timeouts;
use connection::{unavailable, Connection, Connector};
use cross_slot::hash_tag;
pub(crate) use cross_slot::ChargedGroups;
pub(crate) use sans_io::reply_len;
pub use scripts::{general_check_only, library, script_sha, Library, SCRIPT};
pub(crate) use state::RedisStore;

impl RedisStore {
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
        self.link
            .with_connection(|generation, connection| {
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
        if self.link.is_cluster() && checks.iter().any(|c| hash_tag(c) != hash_tag(&checks[0])) {
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
        self.link
            .with_connection(|generation, mut connection| async move {
                let mut tags: Vec<Option<&str>> = if self.link.is_cluster() {
                    checks.iter().map(hash_tag).collect()
                } else {
                    vec![None]
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

    /// The server's clock now, ms, as the limiter's decisions estimate it
    /// (`None` before the first decision): the time a write that is no
    /// decision sends, so that it orders with the decisions around it.
    pub fn now_ms(&self) -> Option<i64> {
        self.clock.estimate_ms(self.clock.local_us())
    }

    /// Gives back admissions of `cost` at `now` for `checks`, one call per
    /// slot on a cluster; `charged[n]`: which state the admission of
    /// `checks[n]` charged. Returns how many checks' charges were given back.
    pub async fn refund(&self, checks: &[RedisCheck<'_>], charged: &[Charged], now: i64, cost: i64) -> Result<usize> {
        self.link
            .with_connection(|generation, mut connection| async move {
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

    /// Releases the leases of `checks` (their `lease`), one call per slot on
    /// a cluster. Returns how many were live at `now` (the server's `TIME`
    /// when `None`).
    pub async fn release(&self, checks: &[RedisCheck<'_>], now: Option<i64>) -> Result<usize> {
        self.link
            .with_connection(|generation, mut connection| async move {
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

    /// Whether the store is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.link.is_cluster()
    }

    /// The string at `key` ('' when none, or not a string): a plain `GET`.
    pub(crate) async fn get_text(&self, key: &str) -> Result<String> {
        self.link
            .with_connection(|generation, mut connection| async move {
                let mut cmd = redis::cmd("GET");
                cmd.arg(key);
                let reply: Result<redis::Value, RedisError> = Connector::query(&mut connection, &cmd).await;
                match reply {
                    Ok(redis::Value::BulkString(bytes)) => Ok(String::from_utf8(bytes).unwrap_or_default()),
                    Ok(_) => Ok(String::new()),
                    // A key holding another type is no record.
                    Err(e) if e.code() == Some("WRONGTYPE") => Ok(String::new()),
                    Err(e) => {
                        self.link.forget(generation);
                        Err(unavailable(e))
                    }
                }
            })
            .await
    }

    /// Whether `key` exists: a plain `EXISTS`, not a script, so it never
    /// counts as a decision's call.
    pub(crate) async fn exists(&self, key: &str) -> Result<bool> {
        self.link
            .with_connection(|generation, mut connection| async move {
                let mut cmd = redis::cmd("EXISTS");
                cmd.arg(key);
                let reply: Result<i64, RedisError> = Connector::query(&mut connection, &cmd).await;
                reply.map(|n| n > 0).map_err(|e| {
                    self.link.forget(generation);
                    unavailable(e)
                })
            })
            .await
    }

    /// Deletes keys.
    pub async fn delete(&self, keys: &[String]) -> Result<()> {
        self.link
            .with_connection(|generation, connection| self.delete_on(generation, connection, keys))
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
                self.link.forget(generation);
                unavailable(e)
            })?;
        }
        Ok(())
    }
}
