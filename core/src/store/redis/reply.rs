//! Reply parsing: a decision's reply becomes verdicts, and a failed call
//! an error, foreign data on a key told apart from the store failing.

use redis::{RedisError, Value};

use super::args::RedisCheck;
use super::connection::unavailable;
use super::state::RedisStore;
use crate::algorithm::{fixed_window, gcra, token_bucket, Kind, Params, Update, Verdict};
use crate::error::{Error, Result};

impl RedisStore {
    /// The error of a failed call for `checks`: foreign data on one of their
    /// keys reaches the caller; anything else is the store failing, and the
    /// connection is dropped so the next call reconnects.
    pub(super) fn call_failed(&self, generation: u64, checks: &[RedisCheck<'_>], e: RedisError) -> Error {
        if is_key_error(&e) {
            let keys: Vec<&str> = checks.iter().flat_map(|c| c.keys.iter().map(String::as_str)).collect();
            Error::Store {
                key: keys.join(" "),
                message: e.to_string(),
            }
        } else {
            self.link.forget(generation);
            unavailable(e)
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

/// A shape function's reply (shapes.lua): one integer (the common case,
/// `now` sent), the state the function decided on: a fixed window's count in
/// now's window, a token bucket's tokens refilled to now, GCRA's wait. The
/// verdict follows from it by the same rules as in the function (the
/// algorithm's `decide`) at the `now` sent. Otherwise a token bucket answers
/// `tokens last_ms now` (its cells refilled to the `now` it decided at), GCRA
/// `tat_ms tat_rem now` (its cells), a fixed window `allowed now remaining
/// reset retry`.
pub(super) fn parse_shape_reply(
    value: Value,
    check: &RedisCheck<'_>,
    now: Option<i64>,
    cost: i64,
) -> Result<(i64, Vec<Verdict>)> {
    let p = check.params;
    let cells_decision = match p.kind {
        Kind::TokenBucket => Some(token_bucket::decide_continuous as Decide),
        Kind::Gcra => Some(gcra::decide as Decide),
        _ => None,
    };
    if let (Some(decide), false) = (cells_decision, matches!(value, Value::Int(_))) {
        let values: Vec<i64> =
            redis::from_redis_value(value).map_err(|e| Error::Internal(format!("decision function: {e}")))?;
        let &[a, b, now] = values.as_slice() else {
            return Err(Error::Internal(format!(
                "a {:?} decision function returned {} values, not 3",
                p.kind,
                values.len()
            )));
        };
        let (verdict, _) = decide(p, Some(&[a, b, now]), now, cost);
        return Ok((now, vec![verdict]));
    }
    if let (Value::Int(state), Some(now)) = (&value, now) {
        let (verdict, _) = match p.kind {
            Kind::FixedWindow => {
                let start = now - now.rem_euclid(p.period);
                fixed_window::decide(p, Some(&[start, *state, start]), now, cost)
            }
            Kind::TokenBucket => token_bucket::decide_continuous(p, Some(&[*state, now, now]), now, cost),
            Kind::Gcra => gcra::decide(p, Some(&gcra::tat_cells(now, *state, p.count, now)), now, cost),
            kind => {
                return Err(Error::Internal(format!(
                    "a {kind:?} decision function answered one integer"
                )))
            }
        };
        return Ok((now, vec![verdict]));
    }
    let values: Vec<i64> =
        redis::from_redis_value(value).map_err(|e| Error::Internal(format!("decision function: {e}")))?;
    let &[allowed, now, remaining, reset, retry] = values.as_slice() else {
        return Err(Error::Internal(format!(
            "decision function returned {} values, not 5",
            values.len()
        )));
    };
    let verdict = Verdict {
        allowed: allowed == 1,
        remaining: remaining.max(0) as u64,
        reset_after_ms: reset.max(0) as u64,
        retry_after_ms: (retry >= 0).then_some(retry as u64),
        delay_ms: 0,
        penalized: false,
        overridden: None,
        limited: false,
        adaptive: None,
    };
    Ok((now, vec![verdict]))
}

/// An algorithm's decision over its cells.
type Decide = fn(&Params, Option<&[i64; 3]>, i64, i64) -> (Verdict, Option<Update>);

pub(super) fn parse_reply(values: &[i64], checks: usize) -> Result<(i64, Vec<Verdict>)> {
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
            .filter(|o| overrides && o[2] != 0)
            .map(|o| ([o[0] as u64, o[1] as u64, o[2].unsigned_abs()], o[2] < 0))
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
            overridden: overridden(i).map(|o| o.0),
            limited: overridden(i).is_some_and(|o| o.1),
            adaptive: report(i, v[5] == 2),
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
