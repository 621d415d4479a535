//! An outcome's response headers ([`Headers`]). Every response carries
//! them, so they are cheap to make: the core's names are static, and the
//! values share one buffer (two allocations for a response's headers, not
//! one per name and one per value).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::ser::{Serialize, SerializeSeq, Serializer};

/// Response headers, in order: (name, value) pairs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// Each header's name and where its value is in `values`.
    fields: Vec<(Cow<'static, str>, Range<usize>)>,
    /// Every value, one after another.
    values: String,
}

impl Headers {
    /// No headers.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// No headers yet, with room for `fields` of them and `bytes` of values.
    pub(crate) fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers {
            fields: Vec::with_capacity(fields),
            values: String::with_capacity(bytes),
        }
    }

    /// Appends the header `name: value`.
    pub fn push(&mut self, name: impl Into<Cow<'static, str>>, value: &str) {
        self.push_with(name, |values| values.push_str(value));
    }

    /// Appends a header whose value `write` appends to the shared buffer
    /// (formatted in place: no string of its own).
    pub(crate) fn push_with(&mut self, name: impl Into<Cow<'static, str>>, write: impl FnOnce(&mut String)) {
        let start = self.values.len();
        write(&mut self.values);
        self.fields.push((name.into(), start..self.values.len()));
    }

    /// How many headers.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The (name, value) pairs, in order.
    pub fn iter(&self) -> HeadersIter<'_> {
        HeadersIter {
            fields: self.fields.iter(),
            values: &self.values,
        }
    }

    /// The value of the first header named `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// The pairs as owned strings (what a binding hands its language).
    pub fn to_vec(&self) -> Vec<(String, String)> {
        self.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }
}

/// The (name, value) pairs of [`Headers`], in order.
pub struct HeadersIter<'a> {
    fields: std::slice::Iter<'a, (Cow<'static, str>, Range<usize>)>,
    values: &'a str,
}

impl<'a> Iterator for HeadersIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, range) = self.fields.next()?;
        Some((name, &self.values[range.clone()]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.fields.size_hint()
    }
}

impl ExactSizeIterator for HeadersIter<'_> {}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a str, &'a str);
    type IntoIter = HeadersIter<'a>;

    fn into_iter(self) -> HeadersIter<'a> {
        self.iter()
    }
}

/// The pairs as owned strings, in order (for a caller that keeps them).
impl IntoIterator for Headers {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.to_vec().into_iter()
    }
}

/// Pairs of any strings (the names are copied: for a reader, not the core's hot path).
impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Headers {
        let mut headers = Headers::new();
        for (name, value) in pairs {
            headers.push(name.as_ref().to_string(), value.as_ref());
        }
        headers
    }
}

/// As the list of pairs it is: `[("RateLimit", "…"), …]`.
impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// As a list of `[name, value]` pairs.
impl Serialize for Headers {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for pair in self {
            seq.serialize_element(&pair)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_in_order_from_one_buffer() {
        let mut headers = Headers::with_capacity(3, 16);
        headers.push("RateLimit-Limit", "10");
        headers.push_with("RateLimit", |v| v.push_str("r=9"));
        headers.push(String::from("X-Custom"), "");
        let pairs: Vec<_> = headers.iter().collect();
        assert_eq!(
            pairs,
            [("RateLimit-Limit", "10"), ("RateLimit", "r=9"), ("X-Custom", "")]
        );
        assert_eq!(headers.len(), 3);
        assert_eq!(headers.get("ratelimit"), Some("r=9"));
        assert_eq!(headers.get("Retry-After"), None);
        assert_eq!(format!("{headers:?}"), format!("{:?}", headers.to_vec()));
        assert_eq!(
            serde_json::to_string(&headers).unwrap(),
            r#"[["RateLimit-Limit","10"],["RateLimit","r=9"],["X-Custom",""]]"#
        );
        assert_eq!(headers, headers.iter().collect::<Headers>());
        let owned: Vec<(String, String)> = headers.clone().into_iter().collect();
        assert_eq!(owned, headers.to_vec());
    }
}
