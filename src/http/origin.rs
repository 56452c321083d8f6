//! Which `Host` and `Origin` the server answers: the defence against DNS
//! rebinding, where a web page the user opened re-points its own name at
//! `127.0.0.1` and then posts to this server as if it were the page's
//! origin. Such a request arrives with the page's name in `Host` (and the
//! same in `Origin`), so the name in `Host` is what gives it away.
//!
//! `POST /mcp` is served only when its `Host` names a loopback address
//! (`localhost`, 127.0.0.0/8, `[::1]`) or one of `--public-host`'s names,
//! and when its `Origin`, if it has one (browsers send it; other clients
//! need not), is the origin of that same `Host` or on `--allowed-origin`'s
//! list. An `Origin` is never trusted for being equal to a `Host` that is
//! not itself trusted.
//!
//! Every other route but `/healthz` (which holds no data), the console
//! included, is served without `--auth-file` only when its `Host` names
//! loopback, a `--public-host` name or any IP address: a rebinding page
//! always reaches the server under its own DNS name, and a client that
//! typed an address is not one. With `--auth-file` they need no such check:
//! a rebound page has no token to send, and cookies are never used.
//!
//! This file decides, and never logs or echoes a header value beyond a
//! quoted excerpt.

use crate::http::ErrorCode;
use crate::input::quote;
use std::fmt;
use std::net::IpAddr;

/// Whether `host` (a name to bind, or a `Host` header's name) is this machine: `localhost`, or
/// an address in 127.0.0.0/8 or `::1`. Any other name counts as reachable.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The names and origins trusted beyond loopback.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    /// `--public-host`: names (no port) a client may reach this server by,
    /// lowercase.
    pub public_hosts: Vec<String>,
    /// `--allowed-origin`: origins (`scheme://host[:port]`) of web pages
    /// allowed to call across origins, lowercase.
    pub allowed_origins: Vec<String>,
}

/// Why a request was refused: the code (`host_not_allowed` or
/// `origin_not_allowed`, both `403`) and what to tell the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

/// A `--public-host` or `--allowed-origin` value that cannot be matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadName {
    pub flag: &'static str,
    pub value: String,
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let expected = match self.flag {
            "--public-host" => "a host name or address without a port, e.g. tools.example.com",
            _ => "an origin: http:// or https://, a host and an optional port, no path",
        };
        write!(f, "{} {:?}: expected {expected}", self.flag, self.value)
    }
}

impl std::error::Error for BadName {}

impl OriginPolicy {
    /// Add a `--public-host` name.
    pub fn add_public_host(&mut self, value: &str) -> Result<(), BadName> {
        let bad = || BadName {
            flag: "--public-host",
            value: value.chars().take(64).collect(),
        };
        let name = value.trim().trim_start_matches('[').trim_end_matches(']');
        let has_port = name.contains(':') && name.parse::<std::net::Ipv6Addr>().is_err();
        if name.is_empty() || has_port || !name.bytes().all(is_name_byte) {
            return Err(bad());
        }
        self.public_hosts.push(name.to_ascii_lowercase());
        Ok(())
    }

    /// Add an `--allowed-origin`.
    pub fn add_allowed_origin(&mut self, value: &str) -> Result<(), BadName> {
        let bad = || BadName {
            flag: "--allowed-origin",
            value: value.chars().take(64).collect(),
        };
        let authority = value
            .strip_prefix("http://")
            .or_else(|| value.strip_prefix("https://"))
            .ok_or_else(bad)?;
        if authority.is_empty() || !authority.bytes().all(is_name_byte) {
            return Err(bad());
        }
        self.allowed_origins.push(value.to_ascii_lowercase());
        Ok(())
    }

    /// Serve this request, or say why not.
    pub fn check(&self, host: Option<&str>, origin: Option<&str>) -> Result<(), Refusal> {
        let host = host.unwrap_or("");
        if !self.trusts_host(host) {
            return Err(Refusal {
                code: ErrorCode::HostNotAllowed,
                message: format!(
                    "Host {} is neither a loopback address nor a --public-host name",
                    quote(host)
                ),
            });
        }
        match origin {
            Some(origin) if !self.trusts_origin(origin, host) => Err(Refusal {
                code: ErrorCode::OriginNotAllowed,
                message: format!(
                    "Origin {} is not this server's own and not an --allowed-origin",
                    quote(origin)
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Serve a request that carries no token (no `--auth-file`) to a route
    /// other than `/mcp`, or say why not: its `Host` must be loopback, a
    /// `--public-host` name or an IP address.
    pub fn check_tokenless_host(&self, host: Option<&str>) -> Result<(), Refusal> {
        // Browsers always send a `Host` (so does every HTTP/1.1 client: the
        // parser refuses a request without one); only HTTP/1.0 may omit it.
        let Some(host) = host.filter(|h| !h.is_empty()) else {
            return Ok(());
        };
        let is_address = bare_name(host).parse::<std::net::IpAddr>().is_ok();
        if is_address || self.trusts_host(host) {
            return Ok(());
        }
        Err(Refusal {
            code: ErrorCode::HostNotAllowed,
            message: format!(
                "Host {} is not an IP address, a loopback name or a --public-host name; \
                 without --auth-file only those are answered",
                quote(host)
            ),
        })
    }

    fn trusts_host(&self, host: &str) -> bool {
        let name = hostname(host);
        let bare = bare_name(host);
        !name.is_empty()
            && (is_loopback(name)
                || self
                    .public_hosts
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(bare)))
    }

    /// The same origin as the (already trusted) `Host`, or on the list.
    fn trusts_origin(&self, origin: &str, host: &str) -> bool {
        let same_origin = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|authority| authority.eq_ignore_ascii_case(host));
        same_origin
            || self
                .allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(origin))
    }
}

/// The name in a `Host` value: `[::1]:8081` → `[::1]`, `a.example:80` →
/// `a.example`.
fn hostname(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The name in a `Host` value without a port or an IPv6 literal's brackets:
/// `[::1]:8081` → `::1`.
fn bare_name(host: &str) -> &str {
    hostname(host).trim_start_matches('[').trim_end_matches(']')
}

/// Letters, digits and the punctuation of host names, IP literals and ports.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']' | b'_')
}

impl From<Refusal> for crate::http::Response {
    fn from(refusal: Refusal) -> Self {
        crate::http::Response::from_error(refusal.code, refusal.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str], origins: &[&str]) -> OriginPolicy {
        let mut p = OriginPolicy::default();
        for h in hosts {
            p.add_public_host(h).unwrap();
        }
        for o in origins {
            p.add_allowed_origin(o).unwrap();
        }
        p
    }

    fn refused(p: &OriginPolicy, host: Option<&str>, origin: Option<&str>) -> Option<ErrorCode> {
        p.check(host, origin).err().map(|r| r.code)
    }

    #[test]
    fn a_loopback_or_public_host_is_served_any_other_refused() {
        let p = policy(&["Tools.Example.com"], &[]);
        for host in [
            "127.0.0.1:8081",
            "localhost",
            "[::1]:80",
            "127.5.0.1",
            "tools.example.com:443",
        ] {
            assert_eq!(refused(&p, Some(host), None), None, "{host}");
        }
        for host in [
            "evil.example.com",
            "evil.example.com:8081",
            "10.0.0.1:8081",
            "",
            "[::2]:1",
        ] {
            assert_eq!(
                refused(&p, Some(host), None),
                Some(ErrorCode::HostNotAllowed),
                "{host}"
            );
        }
        assert_eq!(refused(&p, None, None), Some(ErrorCode::HostNotAllowed));
    }

    /// DNS rebinding: the page's origin equals the Host it rebound, and is
    /// refused for the Host, whatever the Origin says.
    #[test]
    fn an_origin_equal_to_an_untrusted_host_is_refused() {
        let p = OriginPolicy::default();
        let evil = Some("evil.example.com");
        assert_eq!(
            refused(&p, evil, Some("http://evil.example.com")),
            Some(ErrorCode::HostNotAllowed)
        );
    }

    #[test]
    fn an_origin_must_be_the_hosts_own_or_listed() {
        let p = policy(&[], &["http://localhost:5173"]);
        let host = Some("127.0.0.1:8081");
        assert_eq!(refused(&p, host, Some("http://127.0.0.1:8081")), None);
        assert_eq!(refused(&p, host, Some("https://127.0.0.1:8081")), None);
        assert_eq!(refused(&p, host, Some("http://LOCALHOST:5173")), None);
        for origin in [
            "http://localhost:3000",
            "https://evil.example",
            "null",
            "http://127.0.0.1:9",
        ] {
            assert_eq!(
                refused(&p, host, Some(origin)),
                Some(ErrorCode::OriginNotAllowed),
                "{origin}"
            );
        }
    }

    /// Without tokens, the REST routes answer any IP address too (a page
    /// that rebinds reaches the server under its own name, never under an
    /// address), and refuse every other name but loopback and the listed.
    #[test]
    fn without_tokens_a_name_must_be_loopback_or_listed_and_any_address_is_served() {
        let p = policy(&["tools.example.com"], &[]);
        for host in [
            "127.0.0.1:8081",
            "localhost:8081",
            "10.0.0.1:8081",
            "192.168.1.20",
            "[fd00::1]:8081",
            "[::1]",
            "TOOLS.example.com:8081",
        ] {
            assert!(p.check_tokenless_host(Some(host)).is_ok(), "{host}");
        }
        for host in [
            "evil.example.com:8081",
            "10.0.0.1.evil.example",
            "t",
            "[nonsense]",
        ] {
            let refused = p.check_tokenless_host(Some(host)).unwrap_err();
            assert_eq!(refused.code, ErrorCode::HostNotAllowed, "{host}");
        }
        // No browser omits it: an HTTP/1.0 client may.
        assert!(p.check_tokenless_host(None).is_ok());
        assert!(p.check_tokenless_host(Some("")).is_ok());
    }

    #[test]
    fn flag_values_that_cannot_match_are_refused() {
        let mut p = OriginPolicy::default();
        for bad in ["", "a.example:443", "a b", "http://a.example"] {
            assert!(p.add_public_host(bad).is_err(), "{bad}");
        }
        assert!(p.add_public_host("::1").is_ok());
        for bad in [
            "a.example",
            "ftp://a.example",
            "http://",
            "https://a.example/path",
            "null",
        ] {
            assert!(p.add_allowed_origin(bad).is_err(), "{bad}");
        }
    }
}
