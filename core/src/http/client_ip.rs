//! Client address resolution behind trusted proxies, CIDR matching and per-address rate-limit keys.
//!
//! Everything here is plain `std` and never panics, whatever the input.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 network: `10.0.0.0/8`, `2001:db8::/32`, or a bare address (= /32 or /128).
///
/// IPv4-mapped IPv6 networks (`::ffff:10.0.0.0/104`) are stored as the IPv4 network they denote.
/// An IPv4 address is only ever inside an IPv4 network and an IPv6 address only inside an IPv6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    /// The network address, host bits cleared.
    network: IpAddr,
    /// The prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    prefix: u8,
}

impl Cidr {
    /// Parses "addr/prefix" or a bare address; `None` for anything invalid. Host bits are cleared.
    pub(crate) fn parse(text: &str) -> Option<Cidr> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, bits)) => (addr, Some(parse_prefix(bits)?)),
            None => (text, None),
        };
        match addr.parse::<IpAddr>().ok()? {
            IpAddr::V4(v4) => v4_network(v4, prefix.unwrap_or(32)),
            IpAddr::V6(v6) => {
                let prefix = prefix.unwrap_or(128);
                if prefix > 128 {
                    return None;
                }
                match v6.to_ipv4_mapped() {
                    Some(v4) if prefix >= 96 => v4_network(v4, prefix - 96),
                    _ => Some(Cidr {
                        network: IpAddr::V6(mask_v6(v6, prefix)),
                        prefix,
                    }),
                }
            }
        }
    }

    /// Whether `ip` is inside this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask_v4(ip, self.prefix) == net,
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask_v6(ip, self.prefix) == net,
            _ => false,
        }
    }
}

/// Normalizes: IPv4-mapped IPv6 addresses become IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Parses a peer address: `1.2.3.4`, `1.2.3.4:5678`, `::1`, `[::1]`, `[::1]:8080`, `::ffff:1.2.3.4`.
///
/// The result is canonical (IPv4-mapped IPv6 becomes IPv4). Anything else — `None`, `""`, Go's
/// `"@"` for a Unix socket, a socket path — is a peer without an address: `None`.
pub(crate) fn parse_peer(text: &str) -> Option<IpAddr> {
    parse_node(text)
}

/// Which header a trusted proxy's client address is read from (`forwarded_header`).
/// Only that header is believed; the other one is ignored, so a client cannot add the
/// header its proxy does not send and pick its own address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ForwardedHeader {
    /// `X-Forwarded-For` (the default).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=` (RFC 7239).
    Forwarded,
}

impl ForwardedHeader {
    /// `x-forwarded-for` or `forwarded`, in any case.
    pub(crate) fn parse(text: &str) -> Option<ForwardedHeader> {
        if text.eq_ignore_ascii_case("x-forwarded-for") {
            Some(ForwardedHeader::XForwardedFor)
        } else if text.eq_ignore_ascii_case("forwarded") {
            Some(ForwardedHeader::Forwarded)
        } else {
            None
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        }
    }
}

/// The proxies whose forwarding header is believed, and that header.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrustedProxies {
    /// Peers inside these networks are trusted proxies.
    pub networks: Vec<Cidr>,
    /// `unix` in `trusted_proxies`: a peer without an address (a Unix socket) is a trusted proxy.
    pub unix: bool,
    /// The one header the forwarding chain is read from.
    pub header: ForwardedHeader,
}

impl TrustedProxies {
    fn contains(&self, ip: IpAddr) -> bool {
        self.networks.iter().any(|net| net.contains(ip))
    }
}

/// The client address of a request; `None` when it is unknown.
///
/// - `peer` is the TCP peer address; `None` is a peer without an address (a Unix socket, or a
///   framework that gives none). Such a peer is a trusted proxy only with `unix` in `trusted_proxies`;
///   otherwise the client is unknown.
/// - A peer outside every trusted network is returned as is: its forwarding headers are ignored.
/// - For a trusted peer, the forwarding chain is walked right to left and the first untrusted address
///   is returned. The chain is every field line of the one configured header, in order: the
///   comma-separated entries of `X-Forwarded-For`, or the `for=` parameters of `Forwarded`
///   (RFC 7239). The other header is ignored.
/// - If the whole chain is trusted, its left-most address is returned.
/// - The walk stops at an entry that is not an address (garbage, "unknown", "_hidden", a `Forwarded`
///   element without `for`): the address just to its right is returned (the peer if it is right-most).
pub(crate) fn client_ip(
    peer: Option<IpAddr>,
    headers: &[(String, String)],
    proxies: &TrustedProxies,
) -> Option<IpAddr> {
    let mut last = match peer.map(canonical) {
        Some(peer) if !proxies.contains(peer) => return Some(peer),
        Some(peer) => Some(peer),
        None if proxies.unix => None,
        None => return None,
    };
    for entry in forwarding_chain(headers, proxies.header).into_iter().rev() {
        let Some(ip) = entry else { break };
        if !proxies.contains(ip) {
            return Some(ip);
        }
        last = Some(ip);
    }
    last
}

/// Appends the rate-limit key of an address to `out`.
///
/// IPv4 (and IPv4-mapped IPv6) is the dotted quad ("203.0.113.7"). IPv6 is masked to its first
/// `ipv6_subnet` bits and written `<network>/<bits>` (`2001:db8:1:2::/64`); 128 (or more) gives the
/// plain address.
pub(crate) fn push_ip_key(out: &mut String, ip: IpAddr, ipv6_subnet: u8) {
    use std::fmt::Write;
    match canonical(ip) {
        IpAddr::V4(v4) => {
            // The dotted quad, without the formatting machinery (every request has one).
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                super::headers::push_decimal(out, u64::from(octet));
            }
        }
        // Writing to a String cannot fail.
        IpAddr::V6(v6) if ipv6_subnet >= 128 => _ = write!(out, "{v6}"),
        IpAddr::V6(v6) => _ = write!(out, "{}/{}", mask_v6(v6, ipv6_subnet), ipv6_subnet),
    }
}

/// A prefix length: one to three ASCII digits (no sign, no spaces), at most 255 here.
fn parse_prefix(bits: &str) -> Option<u8> {
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    bits.parse().ok()
}

/// The IPv4 network of `ip` with `prefix` bits, `None` if the prefix is longer than 32.
fn v4_network(ip: Ipv4Addr, prefix: u8) -> Option<Cidr> {
    (prefix <= 32).then(|| Cidr {
        network: IpAddr::V4(mask_v4(ip, prefix)),
        prefix,
    })
}

/// `ip` with all but its first `prefix` bits cleared.
fn mask_v4(ip: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
    Ipv4Addr::from(u32::from(ip) & mask)
}

/// `ip` with all but its first `prefix` bits cleared.
fn mask_v6(ip: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
    Ipv6Addr::from(u128::from(ip) & mask)
}

/// The forwarding chain of the configured header, left to right; `None` marks an entry that is
/// not an address. Several field lines of the header are one list.
fn forwarding_chain(headers: &[(String, String)], header: ForwardedHeader) -> Vec<Option<IpAddr>> {
    let values = headers
        .iter()
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case(header.name()))
        .map(|(_, value)| value.as_str());
    let mut chain = Vec::new();
    match header {
        ForwardedHeader::XForwardedFor => chain.extend(
            values
                .flat_map(|value| value.split(','))
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(parse_node),
        ),
        ForwardedHeader::Forwarded => {
            for value in values {
                forwarded_for(value, &mut chain);
            }
        }
    }
    chain
}

/// Appends the `for=` node of every element of one `Forwarded` header value (RFC 7239) to `chain`.
///
/// Empty elements are skipped; an element without `for`, with several `for`, or with a value that
/// is not an address (obfuscated, "unknown", garbage, bad quoting) gives `None`.
fn forwarded_for(value: &str, chain: &mut Vec<Option<IpAddr>>) {
    for element in split_unquoted(value, ',') {
        if element.trim().is_empty() {
            continue;
        }
        let mut nodes = split_unquoted(element, ';').into_iter().filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            name.trim().eq_ignore_ascii_case("for").then(|| unquote(value.trim()))
        });
        let node = match (nodes.next(), nodes.next()) {
            (Some(Some(node)), None) => parse_node(&node),
            _ => None,
        };
        chain.push(node);
    }
}

/// Splits `text` at every `sep` outside double quotes (backslash escapes honoured inside quotes).
fn split_unquoted(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted {
            match c {
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
        } else if c == '"' {
            quoted = true;
        } else if c == sep {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The value of a token or quoted-string; `None` for an unterminated or trailing-garbage quote.
fn unquote(value: &str) -> Option<Cow<'_, str>> {
    let Some(inner) = value.strip_prefix('"') else {
        return Some(Cow::Borrowed(value));
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return chars.as_str().is_empty().then_some(Cow::Owned(out)),
            _ => out.push(c),
        }
    }
    None
}

/// A node address, canonical: a bare address, `[v6]`, `[v6]:port` or `v4:port` (the port may be
/// obfuscated, `_abc`, as RFC 7239 allows). Obfuscated identifiers and "unknown" give `None`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.strip_prefix(':').is_some_and(valid_port) {
            return None;
        }
        return host.parse::<Ipv6Addr>().ok().map(|v6| canonical(IpAddr::V6(v6)));
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    let (host, port) = text.rsplit_once(':')?;
    if !valid_port(port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A numeric port (0..=65535) or an RFC 7239 obfuscated port ("_" followed by ALPHA / DIGIT / "." / "_" / "-").
fn valid_port(port: &str) -> bool {
    match port.strip_prefix('_') {
        Some(rest) => !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        None => {
            !port.is_empty()
                && port.len() <= 5
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ip_key(ip: IpAddr, ipv6_subnet: u8) -> String {
        let mut key = String::from("ip=");
        push_ip_key(&mut key, ip, ipv6_subnet);
        key.split_off(3)
    }

    fn cidr(text: &str) -> Cidr {
        Cidr::parse(text).unwrap_or_else(|| panic!("bad cidr {text}"))
    }

    fn nets(list: &[&str]) -> TrustedProxies {
        TrustedProxies {
            networks: list.iter().map(|text| cidr(text)).collect(),
            ..TrustedProxies::default()
        }
    }

    fn with_header(mut proxies: TrustedProxies, header: ForwardedHeader) -> TrustedProxies {
        proxies.header = header;
        proxies
    }

    fn hdrs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    /// Resolves with peer 10.0.0.1 and trusted 10.0.0.0/8 + fd00::/8, believing `Forwarded` when
    /// the request has a `Forwarded` header and `X-Forwarded-For` otherwise.
    fn resolve(list: &[(&str, &str)]) -> Option<IpAddr> {
        let header = if list.iter().any(|(name, _)| name.eq_ignore_ascii_case("forwarded")) {
            ForwardedHeader::Forwarded
        } else {
            ForwardedHeader::XForwardedFor
        };
        let proxies = with_header(nets(&["10.0.0.0/8", "fd00::/8"]), header);
        client_ip(Some(ip("10.0.0.1")), &hdrs(list), &proxies)
    }

    #[test]
    fn cidr_parses_v4() {
        let net = cidr("10.0.0.0/8");
        assert!(net.contains(ip("10.0.0.1")));
        assert!(net.contains(ip("10.255.255.255")));
        assert!(!net.contains(ip("11.0.0.0")));
        assert!(!net.contains(ip("9.255.255.255")));
        let net = cidr("192.168.1.0/24");
        assert!(net.contains(ip("192.168.1.200")));
        assert!(!net.contains(ip("192.168.2.1")));
    }

    #[test]
    fn cidr_bare_address_is_host_network() {
        assert_eq!(cidr("1.2.3.4"), cidr("1.2.3.4/32"));
        assert!(cidr("1.2.3.4").contains(ip("1.2.3.4")));
        assert!(!cidr("1.2.3.4").contains(ip("1.2.3.5")));
        assert_eq!(cidr("2001:db8::1"), cidr("2001:db8::1/128"));
        assert!(cidr("2001:db8::1").contains(ip("2001:db8::1")));
        assert!(!cidr("2001:db8::1").contains(ip("2001:db8::2")));
    }

    #[test]
    fn cidr_clears_host_bits() {
        assert_eq!(cidr("10.1.2.3/8"), cidr("10.0.0.0/8"));
        assert_eq!(cidr("2001:db8:aa::1/32"), cidr("2001:db8::/32"));
        assert!(cidr("10.1.2.3/8").contains(ip("10.9.9.9")));
    }

    #[test]
    fn cidr_parses_v6() {
        let net = cidr("2001:db8::/32");
        assert!(net.contains(ip("2001:db8::1")));
        assert!(net.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!net.contains(ip("2001:db9::1")));
        let net = cidr("fe80::/10");
        assert!(net.contains(ip("febf::1")));
        assert!(!net.contains(ip("fec0::1")));
    }

    #[test]
    fn cidr_zero_prefix() {
        let all4 = cidr("0.0.0.0/0");
        assert!(all4.contains(ip("1.2.3.4")));
        assert!(all4.contains(ip("255.255.255.255")));
        assert!(all4.contains(ip("::ffff:1.2.3.4")));
        assert!(!all4.contains(ip("2001:db8::1")));
        let all6 = cidr("::/0");
        assert!(all6.contains(ip("2001:db8::1")));
        assert!(all6.contains(ip("::1")));
        assert!(!all6.contains(ip("1.2.3.4")));
        assert!(!all6.contains(ip("::ffff:1.2.3.4")));
    }

    #[test]
    fn cidr_full_prefixes() {
        assert!(cidr("1.2.3.4/32").contains(ip("1.2.3.4")));
        assert!(!cidr("1.2.3.4/32").contains(ip("1.2.3.5")));
        assert!(cidr("::1/128").contains(ip("::1")));
        assert!(!cidr("::1/128").contains(ip("::2")));
        assert!(cidr("128.0.0.0/1").contains(ip("200.0.0.1")));
        assert!(!cidr("128.0.0.0/1").contains(ip("100.0.0.1")));
    }

    #[test]
    fn cidr_mapped_addresses_are_v4() {
        // A mapped address checked against a v4 network.
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
        assert!(!cidr("10.0.0.0/8").contains(ip("::ffff:11.1.2.3")));
        // A mapped network checked against v4 and mapped addresses.
        let net = cidr("::ffff:10.0.0.0/104");
        assert_eq!(net, cidr("10.0.0.0/8"));
        assert!(net.contains(ip("10.20.30.40")));
        assert!(net.contains(ip("::ffff:10.20.30.40")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert_eq!(cidr("::ffff:1.2.3.4"), cidr("1.2.3.4/32"));
        assert_eq!(cidr("::ffff:0:0/96"), cidr("0.0.0.0/0"));
        // v4 networks never hold real IPv6 addresses, and vice versa.
        assert!(!cidr("10.0.0.0/8").contains(ip("a00::1")));
        assert!(!cidr("2001:db8::/32").contains(ip("32.1.13.184")));
    }

    #[test]
    fn cidr_rejects_bad_input() {
        for bad in [
            "10.0.0.0/33",
            "x",
            "",
            "   ",
            "1.2.3.4/",
            "/8",
            "1.2.3.4/-1",
            "1.2.3.4/+8",
            "1.2.3.4/8/8",
            "1.2.3.4/ 8",
            "1.2.3.4/0x8",
            "1.2.3.4/256",
            "1.2.3.4/99999999999999999999",
            "2001:db8::/129",
            "::ffff:1.2.3.4/129",
            "1.2.3",
            "1.2.3.4.5",
            "256.0.0.0/8",
            "010.0.0.0/8",
            "[::1]/128",
            "1.2.3.4:80",
            "fe80::1%eth0",
            "10.0.0.0/8 garbage",
        ] {
            assert_eq!(Cidr::parse(bad), None, "{bad:?} should be rejected");
        }
    }

    #[test]
    fn cidr_trims_surrounding_whitespace() {
        assert_eq!(Cidr::parse(" 10.0.0.0/8\n"), Some(cidr("10.0.0.0/8")));
    }

    #[test]
    fn canonical_unmaps() {
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
        // IPv4-compatible (deprecated) addresses are not mapped ones.
        assert_eq!(canonical(ip("::1.2.3.4")), ip("::1.2.3.4"));
    }

    #[test]
    fn parse_peer_forms() {
        assert_eq!(parse_peer("1.2.3.4"), Some(ip("1.2.3.4")));
        assert_eq!(parse_peer("1.2.3.4:5678"), Some(ip("1.2.3.4")));
        assert_eq!(parse_peer("::1"), Some(ip("::1")));
        assert_eq!(parse_peer("[::1]"), Some(ip("::1")));
        assert_eq!(parse_peer("[::1]:8080"), Some(ip("::1")));
        assert_eq!(parse_peer("::ffff:1.2.3.4"), Some(ip("1.2.3.4")));
        assert_eq!(parse_peer("[::ffff:1.2.3.4]:80"), Some(ip("1.2.3.4")));
        assert_eq!(parse_peer(" 2001:db8::7 "), Some(ip("2001:db8::7")));
    }

    #[test]
    fn parse_peer_rejects_garbage() {
        for bad in [
            "",
            "x",
            "1.2.3.4:",
            "1.2.3.4:65536",
            "1.2.3.4:port",
            "1.2.3.4:80:80",
            "[::1",
            "[::1]:",
            "[::1]x",
            "[1.2.3.4]",
            "[::1]:99999",
            "localhost",
            "localhost:80",
            "unknown",
            "_hidden",
            "1.2.3.4 5",
            "::1::2",
            "[]",
            "]",
            "\u{feff}1.2.3.4",
        ] {
            assert_eq!(parse_peer(bad), None, "{bad:?} should be rejected");
        }
    }

    #[test]
    fn unknown_peer_gives_none() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(None, &hdrs(&[("X-Forwarded-For", "1.2.3.4")]), &trusted),
            None
        );
        assert_eq!(client_ip(None, &[], &TrustedProxies::default()), None);
    }

    #[test]
    fn no_trusted_proxies_means_peer() {
        let headers = hdrs(&[("X-Forwarded-For", "1.2.3.4"), ("Forwarded", "for=5.6.7.8")]);
        assert_eq!(
            client_ip(Some(ip("10.0.0.1")), &headers, &TrustedProxies::default()),
            Some(ip("10.0.0.1"))
        );
    }

    #[test]
    fn spoofed_xff_from_untrusted_peer_is_ignored() {
        let trusted = nets(&["10.0.0.0/8"]);
        let headers = hdrs(&[("X-Forwarded-For", "1.1.1.1, 10.0.0.5")]);
        assert_eq!(
            client_ip(Some(ip("203.0.113.9")), &headers, &trusted),
            Some(ip("203.0.113.9"))
        );
        let headers = hdrs(&[("Forwarded", "for=1.1.1.1")]);
        assert_eq!(
            client_ip(
                Some(ip("203.0.113.9")),
                &headers,
                &with_header(trusted.clone(), ForwardedHeader::Forwarded)
            ),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn peer_is_canonicalized() {
        assert_eq!(
            client_ip(Some(ip("::ffff:203.0.113.9")), &[], &TrustedProxies::default()),
            Some(ip("203.0.113.9"))
        );
        // A mapped peer matches a v4 trusted network.
        let trusted = nets(&["10.0.0.0/8"]);
        let headers = hdrs(&[("X-Forwarded-For", "198.51.100.1")]);
        assert_eq!(
            client_ip(Some(ip("::ffff:10.0.0.1")), &headers, &trusted),
            Some(ip("198.51.100.1"))
        );
    }

    #[test]
    fn trusted_peer_without_headers_is_the_client() {
        assert_eq!(resolve(&[]), Some(ip("10.0.0.1")));
        assert_eq!(resolve(&[("Host", "example.com")]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn rightmost_untrusted_through_two_trusted_proxies() {
        // client 198.51.100.7 -> proxy 10.0.0.3 -> proxy 10.0.0.2 -> us (peer 10.0.0.1)
        let chain = [("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.3, 10.0.0.2")];
        assert_eq!(resolve(&chain), Some(ip("198.51.100.7")));
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7,10.0.0.2")]),
            Some(ip("198.51.100.7"))
        );
    }

    #[test]
    fn xff_header_name_is_case_insensitive() {
        for name in [
            "x-forwarded-for",
            "X-FORWARDED-FOR",
            "X-Forwarded-For",
            "x-Forwarded-fOR",
        ] {
            assert_eq!(resolve(&[(name, "198.51.100.7")]), Some(ip("198.51.100.7")), "{name}");
        }
    }

    #[test]
    fn multiple_xff_headers_concatenate_in_order() {
        let headers = [
            ("X-Forwarded-For", "203.0.113.1, 203.0.113.2"),
            ("Accept", "*/*"),
            ("x-forwarded-for", "198.51.100.7, 10.0.0.9"),
        ];
        assert_eq!(resolve(&headers), Some(ip("198.51.100.7")));
        let headers = [("X-Forwarded-For", "203.0.113.1"), ("X-Forwarded-For", "10.0.0.9")];
        assert_eq!(resolve(&headers), Some(ip("203.0.113.1")));
    }

    #[test]
    fn xff_entries_are_trimmed_and_empty_ones_skipped() {
        assert_eq!(
            resolve(&[("X-Forwarded-For", "  198.51.100.7\t,  10.0.0.2 ")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7,, 10.0.0.2,")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(resolve(&[("X-Forwarded-For", "")]), Some(ip("10.0.0.1")));
        assert_eq!(resolve(&[("X-Forwarded-For", " , ")]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn xff_entries_with_ports_and_v6() {
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7:4711")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve(&[("X-Forwarded-For", "[2001:db8::1]:4711")]),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(
            resolve(&[("X-Forwarded-For", "2001:db8::1, fd00::2")]),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(
            resolve(&[("X-Forwarded-For", "::ffff:198.51.100.7")]),
            Some(ip("198.51.100.7"))
        );
        // A mapped entry inside a trusted v4 network is trusted too.
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7, ::ffff:10.0.0.2")]),
            Some(ip("198.51.100.7"))
        );
    }

    #[test]
    fn all_trusted_chain_gives_leftmost() {
        assert_eq!(
            resolve(&[("X-Forwarded-For", "10.0.0.4, 10.0.0.3, 10.0.0.2")]),
            Some(ip("10.0.0.4"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=10.0.0.4, for=\"[fd00::3]\"")]),
            Some(ip("10.0.0.4"))
        );
    }

    #[test]
    fn garbage_entries_stop_the_walk() {
        // Right-most entry unparsable: the peer.
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7, garbage")]),
            Some(ip("10.0.0.1"))
        );
        // Garbage further left: the last address seen to its right.
        assert_eq!(
            resolve(&[("X-Forwarded-For", "198.51.100.7, nope, 10.0.0.2")]),
            Some(ip("10.0.0.2"))
        );
        assert_eq!(
            resolve(&[("X-Forwarded-For", "1.2.3.4:99999, 10.0.0.3, 10.0.0.2")]),
            Some(ip("10.0.0.3"))
        );
        // Garbage left of an untrusted address never matters.
        assert_eq!(
            resolve(&[("X-Forwarded-For", "\u{0}\u{7f}, 198.51.100.7")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(resolve(&[("X-Forwarded-For", "unknown")]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn only_the_configured_header_is_believed() {
        let trusted = nets(&["10.0.0.0/8"]);
        let xff = with_header(trusted.clone(), ForwardedHeader::XForwardedFor);
        let fwd = with_header(trusted, ForwardedHeader::Forwarded);
        let peer = Some(ip("10.0.0.1"));
        // The proxy sends Forwarded; the client adds X-Forwarded-For to pick its own key.
        let both = hdrs(&[("Forwarded", "for=6.6.6.6"), ("X-Forwarded-For", "203.0.113.5")]);
        assert_eq!(client_ip(peer, &both, &fwd), Some(ip("6.6.6.6")));
        assert_eq!(client_ip(peer, &both, &xff), Some(ip("203.0.113.5")));
        // The configured header missing: the other one is never a fallback.
        let only_fwd = hdrs(&[("Forwarded", "for=6.6.6.6")]);
        assert_eq!(client_ip(peer, &only_fwd, &xff), Some(ip("10.0.0.1")));
        let only_xff = hdrs(&[("X-Forwarded-For", "6.6.6.6")]);
        assert_eq!(client_ip(peer, &only_xff, &fwd), Some(ip("10.0.0.1")));
        assert_eq!(
            ForwardedHeader::parse("X-Forwarded-For"),
            Some(ForwardedHeader::XForwardedFor)
        );
        assert_eq!(ForwardedHeader::parse("forwarded"), Some(ForwardedHeader::Forwarded));
        assert_eq!(ForwardedHeader::parse("x-real-ip"), None);
    }

    #[test]
    fn absent_peer_is_a_trusted_proxy_only_with_unix() {
        let headers = hdrs(&[("X-Forwarded-For", "198.51.100.7, 10.0.0.2")]);
        let mut proxies = nets(&["10.0.0.0/8"]);
        assert_eq!(client_ip(None, &headers, &proxies), None);
        proxies.unix = true;
        assert_eq!(client_ip(None, &headers, &proxies), Some(ip("198.51.100.7")));
        assert_eq!(
            client_ip(None, &hdrs(&[("X-Forwarded-For", "10.0.0.3, 10.0.0.2")]), &proxies),
            Some(ip("10.0.0.3"))
        );
        // No header, or garbage right-most: nothing is known about the client.
        assert_eq!(client_ip(None, &[], &proxies), None);
        assert_eq!(client_ip(None, &hdrs(&[("X-Forwarded-For", "nope")]), &proxies), None);
        // A TCP peer is still judged by the networks.
        assert_eq!(
            client_ip(Some(ip("203.0.113.9")), &headers, &proxies),
            Some(ip("203.0.113.9"))
        );
        for absent in ["", "@", "/run/nginx.sock", "unix:/tmp/s"] {
            assert_eq!(parse_peer(absent), None, "{absent:?}");
        }
    }

    #[test]
    fn forwarded_basic() {
        assert_eq!(resolve(&[("Forwarded", "for=198.51.100.7")]), Some(ip("198.51.100.7")));
        assert_eq!(
            resolve(&[("forwarded", "For=198.51.100.7;proto=https;by=10.0.0.1")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve(&[("FORWARDED", "proto=http; FOR = 198.51.100.7")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve(&[(
                "Forwarded",
                "for=203.0.113.1, for=198.51.100.7;proto=https, for=10.0.0.2"
            )]),
            Some(ip("198.51.100.7"))
        );
    }

    #[test]
    fn forwarded_quoted_ipv6_and_ports() {
        assert_eq!(
            resolve(&[("Forwarded", "for=\"[2001:db8:cafe::17]:4711\"")]),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=\"[2001:db8:cafe::17]\"")]),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=192.0.2.43:47011")]),
            Some(ip("192.0.2.43"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=\"192.0.2.43:47011\"")]),
            Some(ip("192.0.2.43"))
        );
        assert_eq!(resolve(&[("Forwarded", "for=\"192.0.2.43\"")]), Some(ip("192.0.2.43")));
        assert_eq!(
            resolve(&[("Forwarded", "for=\"192.0.2.43:_port1\"")]),
            Some(ip("192.0.2.43"))
        );
        assert_eq!(
            resolve(&[(
                "Forwarded",
                "for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[fd00::7]:80\""
            )]),
            Some(ip("192.0.2.60"))
        );
        // Escapes inside the quoted string are honoured.
        assert_eq!(
            resolve(&[("Forwarded", "for=\"\\[2001:db8::9\\]\"")]),
            Some(ip("2001:db8::9"))
        );
    }

    #[test]
    fn forwarded_quotes_hide_separators() {
        // The comma and semicolon inside quotes do not split the element.
        let value = "for=198.51.100.7;ext=\"a,b;c\", for=10.0.0.2";
        assert_eq!(resolve(&[("Forwarded", value)]), Some(ip("198.51.100.7")));
        let value = "for=198.51.100.7;ext=\"x\\\",for=1.1.1.1\"";
        assert_eq!(resolve(&[("Forwarded", value)]), Some(ip("198.51.100.7")));
    }

    #[test]
    fn multiple_forwarded_headers_concatenate() {
        let headers = [
            ("Forwarded", "for=203.0.113.1"),
            ("Forwarded", "for=198.51.100.7, for=10.0.0.3"),
        ];
        assert_eq!(resolve(&headers), Some(ip("198.51.100.7")));
        let headers = [("Forwarded", "for=203.0.113.1"), ("Forwarded", "for=10.0.0.3")];
        assert_eq!(resolve(&headers), Some(ip("203.0.113.1")));
    }

    #[test]
    fn forwarded_obfuscated_and_garbage_nodes() {
        assert_eq!(resolve(&[("Forwarded", "for=unknown")]), Some(ip("10.0.0.1")));
        assert_eq!(resolve(&[("Forwarded", "for=_hidden")]), Some(ip("10.0.0.1")));
        assert_eq!(resolve(&[("Forwarded", "for=\"_gazonk\"")]), Some(ip("10.0.0.1")));
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7, for=unknown, for=10.0.0.2")]),
            Some(ip("10.0.0.2"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7, for=_x")]),
            Some(ip("10.0.0.1"))
        );
        // An unbracketed v6 with a port, unterminated quotes, junk after the quote.
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7, for=\"[fd00::1]")]),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7, for=\"10.0.0.2\"x")]),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7, for=\"10.0.0.2")]),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(resolve(&[("Forwarded", "for=")]), Some(ip("10.0.0.1")));
        assert_eq!(resolve(&[("Forwarded", "garbage")]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn forwarded_element_without_or_with_duplicate_for_stops_the_walk() {
        // A trusted proxy that omits `for` hides who connected to it: the client's own element is not believed.
        assert_eq!(
            resolve(&[("Forwarded", "for=6.6.6.6, proto=https")]),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=6.6.6.6, by=10.0.0.2, for=10.0.0.3")]),
            Some(ip("10.0.0.3"))
        );
        assert_eq!(
            resolve(&[("Forwarded", "for=6.6.6.6;for=10.0.0.2")]),
            Some(ip("10.0.0.1"))
        );
        // Empty elements are skipped.
        assert_eq!(
            resolve(&[("Forwarded", "for=198.51.100.7,, for=10.0.0.2,")]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(resolve(&[("Forwarded", "")]), Some(ip("10.0.0.1")));
    }

    #[test]
    fn v6_trusted_proxies() {
        let trusted = nets(&["2001:db8:ffff::/48"]);
        let headers = hdrs(&[("X-Forwarded-For", "2001:db8:1::5, 2001:db8:ffff::2")]);
        assert_eq!(
            client_ip(Some(ip("2001:db8:ffff::1")), &headers, &trusted),
            Some(ip("2001:db8:1::5"))
        );
        assert_eq!(
            client_ip(Some(ip("2001:db8:1::1")), &headers, &trusted),
            Some(ip("2001:db8:1::1"))
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        let trusted = nets(&["0.0.0.0/0", "::/0"]);
        let values = [
            "",
            ",",
            ";",
            "=",
            "\"",
            "\\",
            "\"\\",
            "for=\"\\",
            "[",
            "]",
            "[]:",
            "[:::]:1",
            "for=[",
            "for=\"[::1]:\"",
            "é, ü;for=ß",
            "for=\u{1F600}",
            "1.2.3.4:",
            ":::::",
            "for=\"a\";for",
            "for==",
            "\u{0}",
        ];
        for value in values {
            for (name, header) in [
                ("X-Forwarded-For", ForwardedHeader::XForwardedFor),
                ("Forwarded", ForwardedHeader::Forwarded),
            ] {
                let proxies = with_header(trusted.clone(), header);
                let got = client_ip(Some(ip("10.0.0.1")), &hdrs(&[(name, value)]), &proxies);
                assert!(got.is_some(), "{name}: {value:?}");
            }
            let _ = Cidr::parse(value);
            let _ = parse_peer(value);
        }
        let long = "1.2.3.4, ".repeat(10_000);
        assert_eq!(
            client_ip(Some(ip("10.0.0.1")), &hdrs(&[("X-Forwarded-For", &long)]), &trusted),
            Some(ip("1.2.3.4"))
        );
    }

    #[test]
    fn ip_key_v4() {
        assert_eq!(ip_key(ip("203.0.113.7"), 64), "203.0.113.7");
        assert_eq!(ip_key(ip("203.0.113.7"), 128), "203.0.113.7");
        assert_eq!(ip_key(ip("0.0.0.0"), 1), "0.0.0.0");
    }

    #[test]
    fn ip_key_mapped_v4_is_keyed_as_v4() {
        assert_eq!(ip_key(ip("::ffff:203.0.113.7"), 64), "203.0.113.7");
        assert_eq!(ip_key(ip("::ffff:203.0.113.7"), 128), "203.0.113.7");
        assert_eq!(ip_key(ip("::ffff:203.0.113.7"), 64), ip_key(ip("203.0.113.7"), 64));
        assert_ne!(
            ip_key(ip("::ffff:203.0.113.7"), 64),
            ip_key(ip("::ffff:203.0.113.8"), 64)
        );
    }

    #[test]
    fn ip_key_v6_subnets() {
        let a = ip_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 64);
        let b = ip_key(ip("2001:db8:1:2::1"), 64);
        let c = ip_key(ip("2001:db8:1:3::1"), 64);
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(c, "2001:db8:1:3::/64");
        assert_eq!(ip_key(ip("2001:db8:abcd:1234::1"), 48), "2001:db8:abcd::/48");
        assert_eq!(ip_key(ip("2001:db8:abcd:1234::1"), 56), "2001:db8:abcd:1200::/56");
        assert_eq!(ip_key(ip("2001:db8:0:1:1:1:1:1"), 127), "2001:db8:0:1:1:1:1:0/127");
        assert_eq!(ip_key(ip("ffff::1"), 1), "8000::/1");
        assert_eq!(ip_key(ip("::1"), 64), "::/64");
    }

    #[test]
    fn ip_key_v6_full_length_is_plain() {
        assert_eq!(ip_key(ip("2001:db8::1"), 128), "2001:db8::1");
        assert_eq!(
            ip_key(ip("2001:0db8:0000:0000:0000:0000:0000:0001"), 128),
            "2001:db8::1"
        );
        assert_ne!(ip_key(ip("2001:db8::1"), 128), ip_key(ip("2001:db8::2"), 128));
    }

    #[test]
    fn ip_key_out_of_range_subnets_do_not_panic() {
        assert_eq!(ip_key(ip("2001:db8::1"), 0), "::/0");
        assert_eq!(ip_key(ip("2001:db8::1"), 200), "2001:db8::1");
    }
}
