//! The duration grammar shared by every configuration field:
//! `250ms`, `1s`, `2m`, `1h`, `1d`, `1m30s`, and a bare unit (`s`, `min`, `hour`)
//! meaning one of it.

/// Largest duration accepted anywhere: about 100 years. Keeps every product
/// of a duration and a count inside the exactly-representable range of a
/// Lua number (2^53).
pub const MAX_DURATION_MS: u64 = 100 * 365 * 86_400_000;

fn unit_ms(unit: &str) -> Option<u64> {
    Some(match unit {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    })
}

/// Parses a duration into milliseconds. Returns `None` when the text is not a
/// duration or is larger than [`MAX_DURATION_MS`]; zero is returned as `Some(0)`
/// so callers decide whether it is allowed.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    // A bare unit means one of it: "s", "min", "hour".
    if let Some(ms) = unit_ms(text) {
        return Some(ms);
    }
    let bytes = text.as_bytes();
    let mut total: u64 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return None;
        }
        let number: u64 = text[start..i].parse().ok()?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = unit_ms(&text[unit_start..i])?;
        total = total.checked_add(number.checked_mul(unit)?)?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
    }
    (total <= MAX_DURATION_MS).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration_ms as p;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(p("250ms"), Some(250));
        assert_eq!(p("1s"), Some(1_000));
        assert_eq!(p("2m"), Some(120_000));
        assert_eq!(p("1h"), Some(3_600_000));
        assert_eq!(p("1d"), Some(86_400_000));
        assert_eq!(p("1m30s"), Some(90_000));
        assert_eq!(p("10s"), Some(10_000));
        assert_eq!(p("min"), Some(60_000));
        assert_eq!(p("hour"), Some(3_600_000));
        assert_eq!(p(" 2 minutes "), Some(120_000));
        assert_eq!(p("0s"), Some(0));
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "s1",
            "1",
            "ten s",
            "1.5s",
            "-1s",
            "1w",
            "1s-",
            "99999999999999999999s",
            "200y",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(p("36500d"), Some(super::MAX_DURATION_MS));
        assert_eq!(p("36501d"), None, "over the limit");
    }
}
