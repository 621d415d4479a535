//! Cross-slot decisions: on a cluster, checks whose keys live in different
//! slots are decided group by group, peeked first and charged after, with
//! what was charged given back when a later group denies.

use parking_lot::Mutex;

use super::args::RedisCheck;
use super::connection::Connection;
use super::state::{BetweenPasses, RedisStore};
use crate::algorithm::Verdict;
use crate::error::{Error, Result};

/// What a cross-slot decision has charged and not given back yet: the time
/// it decided at and its checks' indices. When the decision ends without
/// finishing (the check's deadline passed, a call failed, its caller gave
/// up), these are charges of a request that is not admitted: the caller
/// gives them back off the request's path (`Engine::decide_redis`).
pub(crate) type ChargedGroups = Mutex<Option<(i64, Vec<usize>)>>;

impl RedisStore {
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
    pub(super) async fn decide_across_slots(
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

    /// Test hook: `hook` runs between the peek and the charge pass of every
    /// cross-slot decision.
    pub(crate) fn set_between_passes(&self, hook: Option<BetweenPasses>) {
        *self.between_passes.lock() = hook;
    }
}

/// The hash tag of a check's keys (they share one): its cluster slot.
pub(super) fn hash_tag<'k>(check: &RedisCheck<'k>) -> Option<&'k str> {
    check.keys[0].rsplit_once('{').map(|(_, tag)| tag)
}

/// The two passes of [`RedisStore::decide_across_slots`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Peek,
    Charge,
}
