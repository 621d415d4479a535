//! Store key layout: a policy's state lives at
//! `<prefix>:<algorithm>:<policy name>:<fingerprint>:{<key>}`, its per-key
//! records (override, penalty, adaptive) at
//! `<prefix>:<algorithm>:<policy name>:{<key>}:<record>`.
//!
//! The fingerprint ([`fingerprint`]) spells exactly the numbers the stored
//! state is measured in: the period (ms) for every kind, and the count too
//! for the kinds whose state is scaled by it (GCRA and the shaping leaky
//! bucket keep a remainder in `1/count` ms). A reload that changes them
//! moves the policy to fresh state keys, so state is never read with the
//! wrong numbers; one that changes anything else (burst, penalty, ...)
//! keeps the state. The records have no fingerprint, so a reload never
//! drops an operator's override or an abuser's block. A concurrency policy
//! has none either: each lease carries its own end. It is computed from the
//! definition alone, so every process and every language agrees on it.
//!
//! User-supplied parts are percent-escaped (`%`, `{`, `}`, and `:` in the
//! policy name), so two different keys never map to the same store key and no
//! input can choose its cluster slot: the hash tag is always exactly the
//! escaped key, and every key of one decision for that key shares it.
//!
//! A user key whose escaped form is longer than [`MAX_KEY_BYTES`] is stored
//! as `%#` and the SHA-256 (hex) of that form, in both stores: `max_keys`
//! then bounds their bytes too. Escaping turns every `%` into `%25`, so no
//! escaped key contains `%#` and a hashed key never equals a literal one.

use std::borrow::Cow;
use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::algorithm::Kind;

/// The algorithm segment of a key. Variants with different state layouts get
/// different names, so switching `refill` or `mode` never misreads old state.
pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::TokenBucket => "token_bucket",
        Kind::TokenBucketInterval => "token_bucket_interval",
        Kind::Gcra => "gcra",
        Kind::LeakyPolice => "leaky_bucket",
        Kind::LeakyShape => "leaky_bucket_shape",
        Kind::FixedWindow => "fixed_window",
        Kind::SlidingWindowLog => "sliding_window_log",
        Kind::SlidingWindowCounter => "sliding_window_counter",
        Kind::Concurrency => "concurrency",
    }
}

/// Percent-escapes the bytes in `special` and `%` itself.
pub(crate) fn escape<'a>(text: &'a str, special: &[u8]) -> Cow<'a, str> {
    if !text.bytes().any(|b| b == b'%' || special.contains(&b)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        match ch {
            '%' => out.push_str("%25"),
            '{' if special.contains(&b'{') => out.push_str("%7B"),
            '}' if special.contains(&b'}') => out.push_str("%7D"),
            ':' if special.contains(&b':') => out.push_str("%3A"),
            _ => out.push(ch),
        }
    }
    Cow::Owned(out)
}

/// The longest user key, escaped, that a store holds as is.
pub(crate) const MAX_KEY_BYTES: usize = 128;

/// The user key as the stores hold it: escaped, or hashed when long. The
/// empty key is `%`, which no escaped key can be: `{}` is no hash tag to Redis
/// Cluster, which would then spread one policy's keys over several slots.
pub(crate) fn stored_key(key: &str) -> Cow<'_, str> {
    if key.is_empty() {
        return Cow::Borrowed("%");
    }
    // The common case, checked without the general escaper: nothing to change.
    if key.len() <= MAX_KEY_BYTES && !key.bytes().any(|b| matches!(b, b'%' | b'{' | b'}')) {
        return Cow::Borrowed(key);
    }
    let escaped = escape(key, b"{}");
    if escaped.len() <= MAX_KEY_BYTES {
        return escaped;
    }
    let digest = Sha256::digest(escaped.as_bytes());
    let mut out = String::with_capacity(2 + 2 * digest.len());
    out.push_str("%#");
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    Cow::Owned(out)
}

/// `<prefix>:<algorithm>:<policy name>:{` — everything before the user key
/// of a policy's per-key records.
pub(crate) fn key_head(prefix: &str, kind: Kind, policy_name: &str) -> String {
    format!("{prefix}:{}:{}:{{", kind_name(kind), escape(policy_name, b"{}:"))
}

/// The numbers a policy's stored state is measured in: `p<period ms>`, and
/// `c<count>` after it for the kinds whose state is scaled by the count;
/// empty for a concurrency policy.
pub(crate) fn fingerprint(kind: Kind, period: i64, count: i64) -> String {
    match kind {
        Kind::Concurrency => String::new(),
        Kind::Gcra | Kind::LeakyShape => format!("p{period}c{count}"),
        _ => format!("p{period}"),
    }
}

/// `<prefix>:<algorithm>:<policy name>:<fingerprint>:{` — everything before
/// the user key of a policy's state keys.
pub(crate) fn state_head(prefix: &str, kind: Kind, policy_name: &str, fingerprint: &str) -> String {
    if fingerprint.is_empty() {
        return key_head(prefix, kind, policy_name);
    }
    format!(
        "{prefix}:{}:{}:{fingerprint}:{{",
        kind_name(kind),
        escape(policy_name, b"{}:")
    )
}

/// The full store key for `key` under `head`.
pub(crate) fn store_key(head: &str, key: &str) -> String {
    let key = stored_key(key);
    let mut out = String::with_capacity(head.len() + key.len() + 1);
    out.push_str(head);
    out.push_str(&key);
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_escaping() {
        let head = key_head("polylimit", Kind::Gcra, "pay:ments");
        assert_eq!(head, "polylimit:gcra:pay%3Aments:{");
        assert_eq!(store_key(&head, "user:42"), "polylimit:gcra:pay%3Aments:{user:42}");
        assert_eq!(store_key(&head, "a}{b%"), "polylimit:gcra:pay%3Aments:{a%7D%7Bb%25}");
    }

    #[test]
    fn state_keys_carry_the_fingerprint() {
        let fp = fingerprint(Kind::Gcra, 1000, 10);
        assert_eq!(
            state_head("polylimit", Kind::Gcra, "api", &fp),
            "polylimit:gcra:api:p1000c10:{"
        );
        let fp = fingerprint(Kind::TokenBucket, 60_000, 5);
        assert_eq!(fp, "p60000");
        assert_eq!(
            state_head(
                "polylimit",
                Kind::Concurrency,
                "pool",
                &fingerprint(Kind::Concurrency, 1, 1)
            ),
            key_head("polylimit", Kind::Concurrency, "pool")
        );
    }

    #[test]
    fn long_keys_are_hashed() {
        let literal = "a".repeat(MAX_KEY_BYTES);
        assert_eq!(stored_key(&literal), literal.as_str());
        // The limit applies to the escaped form: 43 `{` escape to 129 bytes.
        assert_eq!(stored_key(&"{".repeat(42)).len(), 126);
        let braces = "{".repeat(43);
        let long = stored_key(&braces);
        assert!(long.starts_with("%#") && long.len() == 66, "{long}");
        let a = format!("{literal}{}", "x".repeat(72));
        let b = format!("{literal}{}", "y".repeat(72));
        assert_ne!(stored_key(&a), stored_key(&b));
        assert_eq!(stored_key(&a), stored_key(&a.clone()));
        // A short key spelling a hash is escaped, so it stays distinct.
        let hashed = stored_key(&a).into_owned();
        assert_eq!(stored_key(&hashed), format!("%25{}", &hashed[1..]));
        assert_eq!(
            stored_key(&"k".repeat(100 * 1024)).len(),
            66,
            "a 100 KiB key is stored in 66 bytes"
        );
    }

    #[test]
    fn distinct_keys_stay_distinct() {
        let head = key_head("p", Kind::TokenBucket, "x");
        let inputs = ["a", "a}", "a%7D", "a%257D", "{a}", "%7Ba%7D", "", "}", "%"];
        let keys: std::collections::HashSet<_> = inputs.iter().map(|k| store_key(&head, k)).collect();
        assert_eq!(keys.len(), inputs.len());
        for k in &keys {
            // The hash tag is the text between the first '{' and the next '}'.
            let open = k.find('{').unwrap();
            let close = open + k[open..].find('}').unwrap();
            assert_eq!(close, k.len() - 1, "{k}: the tag must span the whole escaped key");
            assert!(close > open + 1, "{k}: an empty tag is no hash tag");
        }
    }
}
