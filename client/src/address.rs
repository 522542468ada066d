//! Where the server is: the address forms every holdline client takes.
//!
//! `host:port`, `host` (port 7380), `[ipv6]:port`, `[ipv6]`, and
//! `redis://[:token@]host[:port][/0]`. Anything else is `invalid` at once,
//! naming the address, before any connection is tried.

use crate::error::Error;
use crate::texts;

/// The port `holdline serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7380;

/// A parsed address: host (without brackets), port, and a URL's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Address {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) token: Option<String>,
}

impl Address {
    /// Parses one of the accepted forms.
    pub(crate) fn parse(text: &str) -> Result<Address, Error> {
        let bad = || texts::bad_address(text);
        let (rest, token) = match text.strip_prefix("redis://") {
            Some(url) => url_parts(url).ok_or_else(bad)?,
            None if text.contains("://") => return Err(bad()),
            None => (text, None),
        };
        let (host, port) = host_port(rest).ok_or_else(bad)?;
        Ok(Address {
            host: host.to_owned(),
            port,
            token,
        })
    }

    /// `host:port` as a dialler takes it (an IPv6 host in brackets).
    pub(crate) fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A URL's authority (without its `/0` database path) and its token.
fn url_parts(url: &str) -> Option<(&str, Option<String>)> {
    let url = url
        .strip_suffix("/0")
        .or_else(|| url.strip_suffix('/'))
        .unwrap_or(url);
    if url.contains('/') || url.contains('?') || url.contains('#') {
        return None;
    }
    match url.rsplit_once('@') {
        None => Some((url, None)),
        Some((userinfo, rest)) => {
            // `:token` (Redis's form) or `default:token`; a bare user name
            // would be a user without a password, which holdline has not.
            let token = userinfo
                .strip_prefix(':')
                .or_else(|| userinfo.strip_prefix("default:"))?;
            if token.is_empty() {
                return None;
            }
            Some((rest, Some(percent_decode(token)?)))
        }
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_port(text: &str) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        if !host.contains(':') {
            return None;
        }
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.split_once(':') {
            None => (text, None),
            Some((host, port)) => (host, Some(port)),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:%".contains(&b));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|&p| p != 0)?
        }
        Some(_) => return None,
    };
    Some((host, port))
}

/// `%XX` escapes in a URL's token.
fn percent_decode(text: &str) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (String, u16, Option<String>) {
        let a = Address::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (a.host_port(), a.port, a.token)
    }

    #[test]
    fn the_accepted_forms() {
        let none = None;
        assert_eq!(
            parsed("127.0.0.1:27400"),
            ("127.0.0.1:27400".into(), 27400, none.clone())
        );
        assert_eq!(
            parsed("127.0.0.1"),
            ("127.0.0.1:7380".into(), 7380, none.clone())
        );
        assert_eq!(
            parsed("localhost"),
            ("localhost:7380".into(), 7380, none.clone())
        );
        assert_eq!(parsed("[::1]:9"), ("[::1]:9".into(), 9, none.clone()));
        assert_eq!(parsed("[::1]"), ("[::1]:7380".into(), 7380, none.clone()));
        assert_eq!(
            parsed("redis://127.0.0.1:27400"),
            ("127.0.0.1:27400".into(), 27400, none.clone())
        );
        assert_eq!(parsed("redis://h"), ("h:7380".into(), 7380, none));
        let tok = Some("s3cret".to_owned());
        assert_eq!(
            parsed("redis://:s3cret@h:1/0"),
            ("h:1".into(), 1, tok.clone())
        );
        assert_eq!(
            parsed("redis://default:s3cret@[::1]"),
            ("[::1]:7380".into(), 7380, tok)
        );
        assert_eq!(parsed("redis://:a%40b@h").2.as_deref(), Some("a@b"));
    }

    #[test]
    fn anything_else_is_invalid_naming_the_address() {
        for bad in [
            "",
            ":7380",
            "h:",
            "h:0",
            "h:65536",
            "h:x",
            "h:1:2",
            "[::1",
            "[::1]x",
            "[h]:1",
            "rediss://h",
            "http://h",
            "redis://",
            "redis://h/1",
            "redis://user@h",
            "redis://:@h",
            "h p",
            "h\n",
        ] {
            let e = Address::parse(bad).expect_err(bad);
            assert_eq!(e.kind(), holdline::ErrorKind::Invalid, "{bad}");
            assert_eq!(
                e.to_string(),
                format!(
                    "store: bad address {bad:?}: expected host, host:port, [ipv6]:port or redis://[:token@]host[:port]: invalid"
                )
            );
        }
    }
}
