//! Fuzz-style tests of the client-address parsers: any string, any header
//! list gives an answer or `None`, never a panic.

use std::net::IpAddr;

use proptest::prelude::*;

use super::client_ip::{client_ip, parse_peer, Cidr, ForwardedHeader, TrustedProxies};

/// Text made mostly of the characters addresses, ports, networks and
/// `Forwarded` elements are written with, so the parsers get deep.
fn addressy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-fA-F:.\\[\\]/%, ;=\"_]{0,48}",
        "(for|by|proto)=\"?\\[?[0-9a-f:.]{0,24}\\]?(:[0-9]{0,6})?\"?(;|, ?)?",
        "[0-9]{1,4}(\\.[0-9]{1,4}){0,4}(/[0-9]{0,4})?(:[0-9]{0,6})?",
        "::(ffff:)?[0-9a-f:.]{0,30}(/[0-9]{0,4})?",
        any::<String>(),
    ]
}

/// 1000 per property, or `POLYLIMIT_FUZZ_CASES` (`make fuzz`).
fn cases() -> u32 {
    std::env::var("POLYLIMIT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn header() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        Just("X-Forwarded-For".to_string()),
        Just("x-forwarded-for".to_string()),
        Just("Forwarded".to_string()),
        Just("forwarded".to_string()),
        Just("X-Real-IP".to_string()),
        any::<String>(),
    ];
    let value = prop_oneof![
        addressy(),
        prop::collection::vec(addressy(), 0..6).prop_map(|parts| parts.join(", ")),
    ];
    (name, value)
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        // IPv4-mapped IPv6 and a few networks trusted below.
        any::<[u8; 4]>().prop_map(|v4| IpAddr::from(std::net::Ipv4Addr::from(v4).to_ipv6_mapped())),
        (0u8..4).prop_map(|b| IpAddr::from([10, 0, 0, b])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn parse_peer_never_panics(text in addressy()) {
        if let Some(ip) = parse_peer(&text) {
            // What parses is an address its own network contains.
            let net = Cidr::parse(&ip.to_string());
            prop_assert!(net.is_some_and(|n| n.contains(ip)), "{text:?} -> {ip}");
        }
    }

    #[test]
    fn cidr_parse_never_panics(text in addressy(), probe in ip()) {
        if let Some(net) = Cidr::parse(&text) {
            let _ = net.contains(probe);
        }
    }

    #[test]
    fn client_ip_never_panics(
        peer in prop::option::of(ip()),
        headers in prop::collection::vec(header(), 0..6),
        trusted in prop::collection::vec(addressy(), 0..4),
        unix in any::<bool>(),
        forwarded in any::<bool>(),
    ) {
        let mut networks: Vec<Cidr> = trusted.iter().filter_map(|t| Cidr::parse(t)).collect();
        networks.extend(Cidr::parse("10.0.0.0/8"));
        let header = if forwarded { ForwardedHeader::Forwarded } else { ForwardedHeader::XForwardedFor };
        let proxies = TrustedProxies { networks, unix, header };
        let got = client_ip(peer, &headers, &proxies);
        if !unix {
            // Without a trusted Unix-socket proxy, no peer address means no client address.
            prop_assert_eq!(got.is_some(), peer.is_some());
        }
    }
}
