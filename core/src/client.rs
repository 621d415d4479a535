//! The Retry-After arithmetic of the client helpers for outgoing calls
//! (tests/conformance/client/retry_after.json): how long a `Retry-After`
//! value asks to wait, and whether and how long to wait before the next
//! attempt. Every language's helper calls it: the JVM's through uniffi,
//! Python's `polylimit.client` through pyo3, JavaScript's `polylimit/client`
//! through napi and Go's `bindings-go/client` through the C ABI; each keeps
//! only its transport, sleep and clock. Options arrive with
//! [`RetryOptions::from_naming`], in the language's names and units.

use crate::error::{Error, Result};
use crate::options::Naming;

/// The wait a `Retry-After` value asks for, in ms from `now_ms`: whole
/// seconds (digits only, spaces around allowed), or an HTTP-date
/// (IMF-fixdate, RFC 850, asctime; always GMT; a past date is 0). `None`
/// for a missing or unreadable value.
pub fn parse_retry_after(value: Option<&str>, now_ms: i64) -> Option<u64> {
    let text = value?.trim();
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().ok()?.checked_mul(1000);
    }
    let when = http_date_ms(text)?;
    Some(u64::try_from(when.saturating_sub(now_ms)).unwrap_or(0))
}

/// When to retry a response: the defaults are the other languages' (3
/// retries, 60 s longest wait, 120 s budget, 10 % jitter, 429 and 503; a
/// status other than 429 only for an idempotent method).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryOptions {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The longest single wait; a longer Retry-After gives up.
    pub max_wait_ms: u64,
    /// No wait ends later than this after the first attempt.
    pub budget_ms: u64,
    /// Up to this fraction of the wait is added (0 to 1).
    pub jitter: f64,
    /// The statuses retried.
    pub statuses: Vec<u16>,
    /// Whether a status other than 429 (a 503 from the app may mean the
    /// request was processed) is retried for a method that is not
    /// idempotent (POST, PATCH, …) too. Off by default.
    pub retry_non_idempotent: bool,
}

impl Default for RetryOptions {
    fn default() -> Self {
        RetryOptions {
            max_retries: 3,
            max_wait_ms: 60_000,
            budget_ms: 120_000,
            jitter: 0.1,
            statuses: vec![429, 503],
            retry_non_idempotent: false,
        }
    }
}

/// Methods a repeat of which changes nothing more (RFC 9110 §9.2.2), so a
/// response that may come after the handler ran can be retried.
const IDEMPOTENT: [&str; 5] = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"];

/// Whether `method` is idempotent (any case; `TRACE` too).
pub fn is_idempotent(method: &str) -> bool {
    IDEMPOTENT.iter().any(|m| m.eq_ignore_ascii_case(method)) || method.eq_ignore_ascii_case("TRACE")
}

/// A helper's options as its language gives them, before any check: the
/// durations in the naming's unit (Python: seconds, JavaScript: ms, Go:
/// `time.Duration` ns), `None` for "not given" (the default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetryInput {
    /// `max_retries` / `maxRetries` / `MaxRetries`.
    pub max_retries: Option<f64>,
    /// `max_wait` / `maxWaitMs` / `MaxWait`.
    pub max_wait: Option<f64>,
    /// `budget` / `budgetMs` / `Budget`.
    pub budget: Option<f64>,
    /// `jitter` / `jitter` / `Jitter`.
    pub jitter: Option<f64>,
    /// `statuses` / `statuses` / `Statuses`.
    pub statuses: Option<Vec<i64>>,
    /// `retry_non_idempotent` / `retryNonIdempotent` / `RetryNonIdempotent`.
    pub retry_non_idempotent: Option<bool>,
}

/// The names and the ms per unit of the durations of a naming.
fn retry_names(naming: Naming) -> ([&'static str; 5], f64) {
    match naming {
        Naming::Snake => (["max_retries", "max_wait", "budget", "jitter", "statuses"], 1000.0),
        Naming::Camel => (["maxRetries", "maxWaitMs", "budgetMs", "jitter", "statuses"], 1.0),
        Naming::Go => (["MaxRetries", "MaxWait", "Budget", "Jitter", "Statuses"], 1e-6),
    }
}

impl RetryOptions {
    /// The options from a language's values, checked by [`Self::validate`]
    /// under the language's names (the error shows the value as given). In
    /// Go's naming a zero is "not set" and a negative is "none", as the
    /// `RetryTransport` struct documents; elsewhere a negative is an error.
    pub fn from_naming(naming: Naming, input: &RetryInput) -> Result<RetryOptions> {
        let ([retries_name, wait_name, budget_name, jitter_name, statuses_name], unit_ms) = retry_names(naming);
        let default = RetryOptions::default();
        let mut given = [input.max_retries, input.max_wait, input.budget, input.jitter];
        if naming == Naming::Go {
            for v in &mut given {
                *v = v.filter(|n| *n != 0.0).map(|n| n.max(0.0));
            }
        }
        let [max_retries, max_wait, budget, jitter] = given;
        let non_negative = |name: &str, v: f64| -> Result<f64> {
            if v >= 0.0 {
                Ok(v)
            } else {
                Err(Error::config(name, v, "is not a non-negative number"))
            }
        };
        let duration = |name: &str, v: Option<f64>, def: u64| -> Result<u64> {
            v.map_or(Ok(def), |v| {
                Ok((non_negative(name, v)? * unit_ms).round().min(u64::MAX as f64) as u64)
            })
        };
        let options = RetryOptions {
            max_retries: match max_retries {
                None => default.max_retries,
                Some(v) if v.fract() == 0.0 => non_negative(retries_name, v)?.min(u32::MAX as f64) as u32,
                Some(v) => return Err(Error::config(retries_name, v, "is not a whole number")),
            },
            max_wait_ms: duration(wait_name, max_wait, default.max_wait_ms)?,
            budget_ms: duration(budget_name, budget, default.budget_ms)?,
            jitter: jitter.unwrap_or(default.jitter),
            statuses: match &input.statuses {
                None => default.statuses,
                Some(list) => list
                    .iter()
                    .map(|s| u16::try_from(*s).map_err(|_| Error::config(statuses_name, s, "is not an HTTP status")))
                    .collect::<Result<_>>()?,
            },
            retry_non_idempotent: input.retry_non_idempotent.unwrap_or(default.retry_non_idempotent),
        };
        // validate names the fields in snake_case: the language's spelling instead.
        options.validate().map_err(|e| match e {
            Error::Config { field, value, message } if field == "jitter" => Error::Config {
                field: jitter_name.to_string(),
                value,
                message,
            },
            e => e,
        })?;
        Ok(options)
    }

    /// The defaults as `naming` gives options (durations in its unit): what
    /// a binding shows for an option left out, so none restates a number.
    pub fn defaults_in(naming: Naming) -> RetryInput {
        let d = RetryOptions::default();
        let (_, unit_ms) = retry_names(naming);
        RetryInput {
            max_retries: Some(f64::from(d.max_retries)),
            max_wait: Some(d.max_wait_ms as f64 / unit_ms),
            budget: Some(d.budget_ms as f64 / unit_ms),
            jitter: Some(d.jitter),
            statuses: Some(d.statuses.iter().map(|s| i64::from(*s)).collect()),
            retry_non_idempotent: Some(d.retry_non_idempotent),
        }
    }

    /// An error naming `jitter` when it is not a fraction from 0 to 1.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(Error::config("jitter", self.jitter, "is not a fraction from 0 to 1"));
        }
        Ok(())
    }

    /// Whether a response with `status` to a `method` request is retried
    /// at all: `status` is one of `statuses`, and it is 429 (the limiter
    /// refused before the handler ran) or the method is idempotent or
    /// `retry_non_idempotent` is set.
    pub fn retries(&self, method: &str, status: u16) -> bool {
        self.statuses.contains(&status) && (status == 429 || self.retry_non_idempotent || is_idempotent(method))
    }

    /// [`Self::wait_ms`] from the first attempt's clock reading
    /// `started_ms` and the current one `now_ms` (a clock that went back
    /// counts as no time elapsed).
    #[allow(clippy::too_many_arguments)]
    pub fn wait_since(
        &self,
        method: &str,
        status: u16,
        retry_after: Option<&str>,
        retries: u32,
        started_ms: i64,
        now_ms: i64,
        random: f64,
    ) -> Option<u64> {
        let elapsed = u64::try_from(now_ms.saturating_sub(started_ms)).unwrap_or(0);
        self.wait_ms(method, status, retry_after, retries, elapsed, now_ms, random)
    }

    /// The wait in ms before the next attempt after a response with
    /// `status` and `retry_after` (its Retry-After value) to a `method`
    /// request ([`Self::retries`]), after `retries`
    /// retries, `elapsed_ms` after the first attempt, with the random draw
    /// `random` in [0, 1); `None` to give up and return the response:
    /// `min(delay * (1 + jitter * random), max_wait)`, given up when the
    /// status is not retried, there is no readable delay, `delay > max_wait`,
    /// `retries >= max_retries`, or `elapsed + wait > budget`.
    #[allow(clippy::too_many_arguments)]
    pub fn wait_ms(
        &self,
        method: &str,
        status: u16,
        retry_after: Option<&str>,
        retries: u32,
        elapsed_ms: u64,
        now_ms: i64,
        random: f64,
    ) -> Option<u64> {
        if !self.retries(method, status) || retries >= self.max_retries {
            return None;
        }
        let delay = parse_retry_after(retry_after, now_ms)?;
        if delay > self.max_wait_ms {
            return None;
        }
        let jittered = (delay as f64 * (1.0 + self.jitter * random.clamp(0.0, 1.0))) as u64;
        let wait = jittered.max(delay).min(self.max_wait_ms);
        (elapsed_ms.saturating_add(wait) <= self.budget_ms).then_some(wait)
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// An HTTP-date (RFC 9110 §5.6.7) in ms since the epoch.
fn http_date_ms(text: &str) -> Option<i64> {
    let number = |s: &str, len: usize| -> Option<i64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let month = |s: &str| MONTHS.iter().position(|m| *m == s).map(|i| i as i64 + 1);
    let clock = |s: &str| -> Option<i64> {
        let mut parts = s.split(':');
        let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
        let (h, m, sec) = (number(h, 2)?, number(m, 2)?, number(sec, 2)?);
        (parts.next().is_none() && h < 24 && m < 60 && sec < 60).then_some(h * 3600 + m * 60 + sec)
    };
    let (day, mon, year, time) = if let Some((weekday, rest)) = text.split_once(", ") {
        let fields: Vec<&str> = rest.split(' ').collect();
        if DAYS.contains(&weekday) && fields.len() == 5 && fields[4] == "GMT" {
            // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
            (
                number(fields[0], 2)?,
                month(fields[1])?,
                number(fields[2], 4)?,
                clock(fields[3])?,
            )
        } else if LONG_DAYS.contains(&weekday) && fields.len() == 3 && fields[2] == "GMT" {
            // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT (two-digit years as Go reads them)
            let date: Vec<&str> = fields[0].split('-').collect();
            if date.len() != 3 {
                return None;
            }
            let yy = number(date[2], 2)?;
            (
                number(date[0], 2)?,
                month(date[1])?,
                if yy >= 69 { 1900 + yy } else { 2000 + yy },
                clock(fields[1])?,
            )
        } else {
            return None;
        }
    } else {
        // asctime: Sun Nov  6 08:49:37 1994 (GMT)
        let (weekday, rest) = text.split_once(' ')?;
        let (mon, rest) = rest.split_once(' ')?;
        let (day, rest) = match rest.strip_prefix(' ') {
            Some(rest) => (rest.get(..1)?, rest.get(1..)?),
            None => (rest.get(..2)?, rest.get(2..)?),
        };
        let fields: Vec<&str> = rest.strip_prefix(' ')?.split(' ').collect();
        if !DAYS.contains(&weekday) || fields.len() != 2 {
            return None;
        }
        let day = match day.len() {
            1 => number(day, 1)?,
            _ => number(day, 2)?,
        };
        (day, month(mon)?, number(fields[1], 4)?, clock(fields[0])?)
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if day < 1 || day > days_in_month[(mon - 1) as usize] {
        return None;
    }
    Some((days_from_civil(year, mon, day) * 86_400 + time) * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_date_forms() {
        let at = 784_111_777_000; // Sun, 06 Nov 1994 08:49:37 GMT
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_retry_after(Some(form), at - 5000), Some(5000), "{form}");
        }
        for bad in [
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun, 06 Nov 1994 24:00:00 GMT",
        ] {
            assert_eq!(parse_retry_after(Some(bad), 0), None, "{bad}");
        }
    }

    #[test]
    fn options_in_each_language() {
        let given = |max_wait: f64| RetryInput {
            max_wait: Some(max_wait),
            ..RetryInput::default()
        };
        assert_eq!(
            RetryOptions::from_naming(Naming::Snake, &given(1.5))
                .unwrap()
                .max_wait_ms,
            1500
        );
        assert_eq!(
            RetryOptions::from_naming(Naming::Camel, &given(1500.0))
                .unwrap()
                .max_wait_ms,
            1500
        );
        assert_eq!(
            RetryOptions::from_naming(Naming::Go, &given(1.5e9))
                .unwrap()
                .max_wait_ms,
            1500
        );
        // Go: zero is the default, a negative is none.
        let go = RetryOptions::from_naming(
            Naming::Go,
            &RetryInput {
                max_retries: Some(-1.0),
                jitter: Some(0.0),
                ..given(0.0)
            },
        )
        .unwrap();
        assert_eq!((go.max_retries, go.jitter, go.max_wait_ms), (0, 0.1, 60_000));
        let err = RetryOptions::from_naming(Naming::Snake, &given(-1.0)).unwrap_err();
        assert_eq!(err.to_string(), "max_wait: -1 is not a non-negative number");
        let err = RetryOptions::from_naming(
            Naming::Go,
            &RetryInput {
                jitter: Some(2.0),
                ..RetryInput::default()
            },
        );
        assert_eq!(err.unwrap_err().to_string(), "Jitter: 2 is not a fraction from 0 to 1");
    }
}
