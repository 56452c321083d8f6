//! Which address a request came from, for the access log: the connection's
//! peer, unless that peer is one of the `--trusted-proxy` addresses — then the
//! address that proxy says it forwarded for (`X-Forwarded-For`).
//!
//! Anyone can send `X-Forwarded-For`; only a proxy the operator named may be
//! believed. The header is read from the right (the hop nearest to us): each
//! address a trusted proxy appended is followed one step further, and the
//! first address that is not a trusted proxy is the client (nginx's
//! `real_ip_recursive on`). A malformed entry stops the walk at the last
//! address that was trusted. It is pure: no socket, no clock.

use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// The proxies whose `X-Forwarded-For` is believed: addresses and networks
/// (`10.0.0.7`, `10.0.0.0/8`, `::1`). Empty by default: the header is ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

/// An entry of a `--trusted-proxy` list that is neither an address nor a
/// network (the first 64 characters given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAnAddress(pub String);

impl fmt::Display for NotAnAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an IP address or network (such as 10.0.0.7 or 10.0.0.0/8)",
            self.0
        )
    }
}

impl std::error::Error for NotAnAddress {}

impl TrustedProxies {
    /// A comma-separated list of addresses and networks; empty trusts none.
    pub fn parse(list: &str) -> Result<TrustedProxies, NotAnAddress> {
        list.split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| NotAnAddress(entry.chars().take(64).collect()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// The client of a request that arrived from `peer` with these
    /// `X-Forwarded-For` values (in arrival order; each a comma list).
    pub fn client_address<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    ) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let hops = forwarded_for.rev().flat_map(|value| value.rsplit(','));
        for hop in hops {
            match parse_hop(hop) {
                Some(addr) => {
                    client = addr;
                    if !self.trusts(addr) {
                        break;
                    }
                }
                None => break,
            }
        }
        client
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.0.iter().map(IpNet::to_string).collect();
        f.write_str(&list.join(","))
    }
}

/// One entry of `X-Forwarded-For`: an address, possibly with a port
/// (`[::1]:443`, `1.2.3.4:80`), as some proxies write it.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(addr) = hop.parse::<IpAddr>() {
        return Some(addr.to_canonical());
    }
    hop.parse::<std::net::SocketAddr>()
        .ok()
        .map(|socket| socket.ip().to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        let none = TrustedProxies::default();
        let client = none.client_address(ip("127.0.0.1"), ["203.0.113.9"].into_iter());
        assert_eq!(client, ip("127.0.0.1"));
    }

    #[test]
    fn a_trusted_proxy_is_followed_to_the_first_untrusted_hop() {
        let trusted = TrustedProxies::parse("127.0.0.1, 10.0.0.0/8").unwrap();
        // A client-supplied first entry is not believed past an untrusted hop.
        let header = ["198.51.100.1, 203.0.113.9", "10.1.2.3"];
        let client = trusted.client_address(ip("127.0.0.1"), header.into_iter());
        assert_eq!(client, ip("203.0.113.9"));
        // An untrusted peer's header is ignored.
        let client = trusted.client_address(ip("192.0.2.1"), header.into_iter());
        assert_eq!(client, ip("192.0.2.1"));
        // Only trusted hops: the leftmost; garbage stops the walk.
        let client = trusted.client_address(ip("127.0.0.1"), ["10.0.0.2, 10.0.0.1"].into_iter());
        assert_eq!(client, ip("10.0.0.2"));
        let client = trusted.client_address(ip("127.0.0.1"), ["evil, 10.0.0.1"].into_iter());
        assert_eq!(client, ip("10.0.0.1"));
        let client = trusted.client_address(ip("127.0.0.1"), ["[2001:db8::1]:443"].into_iter());
        assert_eq!(client, ip("2001:db8::1"));
        let client = trusted.client_address(ip("::ffff:127.0.0.1"), ["192.0.2.7"].into_iter());
        assert_eq!(client, ip("192.0.2.7"));
    }

    #[test]
    fn lists_are_parsed_strictly_and_printed_back() {
        let trusted = TrustedProxies::parse("10.0.0.7,::1,192.168.0.0/16").unwrap();
        assert_eq!(trusted.to_string(), "10.0.0.7/32,::1/128,192.168.0.0/16");
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
        assert!(TrustedProxies::parse("proxy.example").is_err());
    }
}
