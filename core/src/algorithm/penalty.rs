//! Progressive blocking: `threshold` denials within `within` block the key for
//! the next cooldown; each block steps the level up (to at most the number of
//! cooldowns), and the level steps down once per `forget_after` without
//! denials. Mirrored by `core/lua/penalty.lua`.
//!
//! Cells: `[blocked_until_ms, level, denials, window_start_ms, last_denial_ms]`.
//! Once its time to live has passed the state equals a new key's (level 0).

use crate::policy::Penalty;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PenaltyParams {
    pub threshold: i64,
    pub within: i64,
    pub forget_after: i64,
    pub cooldowns: Vec<i64>,
}

impl PenaltyParams {
    pub fn new(p: &Penalty) -> PenaltyParams {
        PenaltyParams {
            threshold: p.threshold as i64,
            within: p.within_ms as i64,
            forget_after: p.forget_after_ms as i64,
            cooldowns: p.cooldowns_ms.iter().map(|c| *c as i64).collect(),
        }
    }
}

/// How long the key is still blocked at `now` (0: not blocked).
pub(crate) fn blocked_for(cells: Option<&[i64; 5]>, now: i64) -> i64 {
    cells.map_or(0, |c| (c[0] - now).max(0))
}

/// A violation recorded at `now`.
pub(crate) struct Violation {
    pub cells: [i64; 5],
    /// The block it started, if it reached the threshold.
    pub block_ms: Option<i64>,
    pub ttl_ms: i64,
}

/// Records a denial by the rate limit at `now`.
pub(crate) fn record_denial(p: &PenaltyParams, cells: Option<&[i64; 5]>, now: i64) -> Violation {
    // Only an unblocked key records denials, so any block in `cells` is over:
    // it is dropped, as an expired record would be (the clock going back
    // then finds the same record whether or not a store had expired it).
    let (mut blocked_until, mut level, mut denials, mut window_start) = (0, 0, 0, now);
    if let Some(c) = cells {
        level = c[1];
        denials = c[2];
        window_start = c[3];
        if now > c[4] {
            level = (level - (now - c[4]) / p.forget_after).max(0);
        }
    }
    if cells.is_none() || now - window_start >= p.within {
        window_start = now;
        denials = 0;
    }
    denials += 1;
    let mut block_ms = None;
    if denials >= p.threshold {
        let cooldown = p.cooldowns[(level as usize).min(p.cooldowns.len() - 1)];
        blocked_until = now + cooldown;
        // Past the last cooldown a higher level blocks no longer; capping it
        // bounds how long the record lives (`level * forget_after`).
        level = (level + 1).min(p.cooldowns.len() as i64);
        denials = 0;
        window_start = now;
        block_ms = Some(cooldown);
    }
    let ttl_ms = (blocked_until - now)
        .max(window_start + p.within - now)
        .max(level * p.forget_after)
        .max(1);
    Violation {
        cells: [blocked_until, level, denials, window_start, now],
        block_ms,
        ttl_ms,
    }
}
