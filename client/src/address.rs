//! Where the server is: the address forms every holdline client takes.
//!
//! `host:port`, `host` (port 7380), `[ipv6]:port`, `[ipv6]`,
//! `redis://[[user]:token@]host[:port][/0]`, and `rediss://` the same over
//! TLS. Anything else is `invalid` at once, naming the address, before any
//! connection is tried.

use crate::error::Error;
use crate::texts;

/// The port `holdline serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7380;

/// A parsed address: host (without brackets), port, a URL's user and
/// token, and what the address says about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Address {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The URL's user name (`None`: none, or an empty one: `default`).
    pub(crate) user: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) scheme: Scheme,
}

/// What an address says about TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `host:port` and the other bare forms: TLS when the options ask.
    Bare,
    /// `redis://`: plain text.
    Plain,
    /// `rediss://`: TLS.
    Tls,
}

impl Address {
    /// Parses one of the accepted forms.
    pub(crate) fn parse(text: &str) -> Result<Address, Error> {
        let bad = || texts::bad_address(text);
        let (url, scheme) = if let Some(url) = text.strip_prefix("redis://") {
            (Some(url), Scheme::Plain)
        } else if let Some(url) = text.strip_prefix("rediss://") {
            (Some(url), Scheme::Tls)
        } else if text.contains("://") {
            return Err(bad());
        } else {
            (None, Scheme::Bare)
        };
        let (rest, user, token) = match url {
            Some(url) => url_parts(url).ok_or_else(bad)?,
            None => (text, None, None),
        };
        let (host, port) = host_port(rest).ok_or_else(bad)?;
        Ok(Address {
            host: host.to_owned(),
            port,
            user,
            token,
            scheme,
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

/// A URL's authority (without its `/0` database path), its user (`None`
/// when none or empty: `default`) and its token.
fn url_parts(url: &str) -> Option<(&str, Option<String>, Option<String>)> {
    let url = url
        .strip_suffix("/0")
        .or_else(|| url.strip_suffix('/'))
        .unwrap_or(url);
    if url.contains('/') || url.contains('?') || url.contains('#') {
        return None;
    }
    match url.rsplit_once('@') {
        None => Some((url, None, None)),
        Some((userinfo, rest)) => {
            // `user:token`, `:token` (Redis's form, the user `default`); a
            // bare user name would be a user without a password, which
            // holdline has not.
            let (user, token) = userinfo.split_once(':')?;
            if token.is_empty() {
                return None;
            }
            let user = match percent_decode(user)? {
                user if user.is_empty() => None,
                user if is_user_name(&user) => Some(user),
                _ => return None,
            };
            Some((rest, user, Some(percent_decode(token)?)))
        }
    }
}

/// Whether `name` is a user name: 1 to 64 ASCII letters, digits or
/// `_-.:@`.
pub(crate) fn is_user_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:@".contains(&b))
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

    fn user(text: &str) -> Option<String> {
        Address::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .user
    }

    fn scheme(text: &str) -> Scheme {
        Address::parse(text).unwrap().scheme
    }

    #[test]
    fn rediss_is_the_same_url_over_tls() {
        assert_eq!(
            parsed("rediss://:s3cret@h:1/0"),
            ("h:1".into(), 1, Some("s3cret".to_owned()))
        );
        assert_eq!(parsed("rediss://[::1]"), ("[::1]:7380".into(), 7380, None));
        assert_eq!(scheme("rediss://h"), Scheme::Tls);
        assert_eq!(scheme("redis://h"), Scheme::Plain);
        assert_eq!(scheme("h:1"), Scheme::Bare);
        assert_eq!(scheme("[::1]"), Scheme::Bare);
        for bad in ["rediss://", "rediss://h/1", "redisss://h", "rediss:/h"] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
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
    fn a_url_names_its_user_before_the_token() {
        assert_eq!(user("redis://:s3cret@h"), None);
        assert_eq!(user("redis://h"), None);
        assert_eq!(user("redis://default:s3cret@h").as_deref(), Some("default"));
        assert_eq!(
            parsed("redis://alice:tok:en@h:1"),
            ("h:1".into(), 1, Some("tok:en".to_owned()))
        );
        assert_eq!(user("rediss://alice:tok@h").as_deref(), Some("alice"));
        assert_eq!(
            user("redis://team-b.ops_1:t@h").as_deref(),
            Some("team-b.ops_1")
        );
        // `:` and `@` in a name: escaped, or `@` as it is (the last `@` ends it).
        assert_eq!(user("redis://a%3Ab%40c:t@h").as_deref(), Some("a:b@c"));
        assert_eq!(user("redis://a@b:t@h").as_deref(), Some("a@b"));
        assert_eq!(
            user(&format!("redis://{}:t@h", "u".repeat(64))).map(|u| u.len()),
            Some(64)
        );
        assert!(is_user_name("a") && !is_user_name("") && !is_user_name("a b"));
        let long = format!("redis://{}:t@h", "u".repeat(65));
        assert_eq!(
            Address::parse(&long).unwrap_err().kind(),
            holdline::ErrorKind::Invalid
        );
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
            "http://h",
            "redis://",
            "redis://h/1",
            "redis://user@h",
            "redis://user:@h",
            "redis://:@h",
            "redis://al ice:t@h",
            "redis://al%20ice:t@h",
            "redis://al%C3%A9:t@h",
            "redis://é:t@h",
            "redis://a/b:t@h",
            "h p",
            "h\n",
        ] {
            let e = Address::parse(bad).expect_err(bad);
            assert_eq!(e.kind(), holdline::ErrorKind::Invalid, "{bad}");
            assert_eq!(
                e.to_string(),
                format!(
                    "store: bad address {bad:?}: expected host, host:port, [ipv6]:port or redis[s]://[[user]:token@]host[:port]: invalid"
                )
            );
        }
    }
}
