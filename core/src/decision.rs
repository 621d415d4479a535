//! What a check returns.

use crate::algorithm::Verdict;

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The configured store.
    Store,
    /// The process-local fallback limiter (store unavailable, `on_store_error: local`).
    Local,
    /// Allowed because the store is unavailable (`on_store_error: fail_open`).
    FailOpen,
    /// Denied because the store is unavailable (`on_store_error: fail_closed`).
    FailClosed,
    /// Denied: the key is serving a penalty block.
    Penalty,
    /// Allowed: the key or address is allowlisted.
    Allowlist,
    /// Denied: the key or address is denylisted.
    Denylist,
    /// Denied: the key is anomalous and over its shrunk (adaptive) budget.
    Adaptive,
}

impl Source {
    /// Every source, in the order bindings number them (a decision record's
    /// source in Node, a packed outcome's in Go, `polylimit_source_t` in C).
    pub const ALL: [Source; 8] = [
        Source::Store,
        Source::Local,
        Source::FailOpen,
        Source::FailClosed,
        Source::Penalty,
        Source::Allowlist,
        Source::Denylist,
        Source::Adaptive,
    ];

    /// This source's place in [`Source::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in every binding and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::Local => "local",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Penalty => "penalty",
            Source::Allowlist => "allowlist",
            Source::Denylist => "denylist",
            Source::Adaptive => "adaptive",
        }
    }
}

/// The decision for one policy and one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The request may proceed.
    pub allowed: bool,
    /// The policy's count: burst for buckets, limit per window for windows.
    pub limit: u64,
    /// Whole requests still available right after this decision.
    pub remaining: u64,
    /// Time until the limiter is back to its full, idle state for this key.
    pub reset_after_ms: u64,
    /// When denied: time until the same request could be allowed; `None` when
    /// allowed, or when the cost can never fit.
    pub retry_after_ms: Option<u64>,
    /// Shape mode: how long to hold the request before serving it.
    pub delay_ms: u64,
    /// Who decided.
    pub source: Source,
}

impl Decision {
    pub(crate) fn from_verdict(v: Verdict, limit: u64, source: Source) -> Decision {
        Decision {
            allowed: v.allowed,
            limit,
            remaining: v.remaining,
            reset_after_ms: v.reset_after_ms,
            retry_after_ms: v.retry_after_ms,
            delay_ms: v.delay_ms,
            source,
        }
    }
}

/// A slot (or `cost` slots) of a `concurrency` policy held by a request in
/// flight: give it back with [`crate::Limiter::release`] when the request
/// ends. Unreleased, it ends by itself after the policy's `lease`. Small on
/// purpose: (policy index, key, id) is all a release needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The policy's index in its limiter.
    pub policy: usize,
    /// The key it was acquired for (as the check was given it).
    pub key: String,
    /// The lease id: 32 hex digits (random), then `*<n>` when it holds n > 1 slots.
    pub id: String,
}

/// The decisions of one check across its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Every policy allowed (and so every policy was charged).
    pub allowed: bool,
    /// The clock the decision used, in ms since the epoch (Redis `TIME` for Redis).
    pub now_ms: i64,
    /// One decision per policy, in the order the policies were given.
    pub decisions: Vec<Decision>,
    /// The concurrency leases the check took (none unless it was allowed):
    /// release them when the request ends.
    pub leases: Vec<Lease>,
    /// Per decision, the numbers of the per-key override that decided it
    /// (count, period ms, burst), for the headers; empty when none did.
    pub(crate) overridden: Vec<Option<[u64; 3]>>,
    /// Per decision (as `overridden`): its numbers are a policy-wide limit's.
    pub(crate) limited: Vec<bool>,
}

impl CheckResult {
    /// The index of the decision closest to denying: a denied one with the
    /// longest wait (a cost that never fits first), otherwise the allowed one
    /// with the fewest remaining requests (then the longest reset).
    pub fn closest_to_denying(&self) -> usize {
        self.closest_among(0..self.decisions.len())
    }

    /// [`CheckResult::closest_to_denying`] among some of the decisions.
    pub(crate) fn closest_among(&self, candidates: impl Iterator<Item = usize>) -> usize {
        let key = |d: &Decision| {
            if d.allowed {
                (0, u64::MAX - d.remaining, d.reset_after_ms)
            } else {
                (1, d.retry_after_ms.unwrap_or(u64::MAX), d.reset_after_ms)
            }
        };
        candidates.max_by_key(|&i| key(&self.decisions[i])).unwrap_or(0)
    }

    /// The decision closest to denying, as headers describe it.
    pub fn decision(&self) -> Decision {
        self.decisions[self.closest_to_denying()]
    }
}

#[cfg(test)]
mod tests {
    use super::Source;

    /// Where each source belongs in [`Source::ALL`]. A new source is a
    /// compile error here: add it to `ALL` too.
    fn position(source: Source) -> usize {
        match source {
            Source::Store => 0,
            Source::Local => 1,
            Source::FailOpen => 2,
            Source::FailClosed => 3,
            Source::Penalty => 4,
            Source::Allowlist => 5,
            Source::Denylist => 6,
            Source::Adaptive => 7,
        }
    }

    #[test]
    fn every_source_is_listed_once_at_its_index() {
        for (i, source) in Source::ALL.iter().enumerate() {
            assert_eq!(source.index(), i, "{source:?}");
            assert_eq!(position(*source), i, "{source:?}");
        }
        let names: std::collections::HashSet<_> = Source::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), Source::ALL.len());
    }
}
