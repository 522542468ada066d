//! Who may connect and what each may do.
//!
//! Users come from `--users PATH`, one a line, `NAME TOKEN [admin]
//! [locks=GLOB,GLOB...]` (`#` starts a comment), read again on SIGHUP; or
//! from `--token-file`, the one user `default` with every right. Without
//! either, every connection is `default` with every right and nobody
//! authenticates. A user without `admin` may name only the locks its
//! globs match, and sees and kills only its own connections; the checks
//! are the commands' (through [`User::may_use`]).
//!
//! A token is given as itself or, recommended, as `sha256:HEX` (the 64
//! hex digits of its SHA-256, `printf %s TOKEN | sha256sum`), so the file
//! holds nothing a reader could log in with. Tokens are compared in
//! constant time in their content (a hashed one after hashing what was
//! given). A reload changes who may connect next; the connections of a
//! user it removed or gave another token are closed (`server`), the
//! others keep the user they authenticated as.

use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use subtle::ConstantTimeEq;

/// The user of `--token-file`, and of a server with no authentication.
pub const DEFAULT_USER: &str = "default";

/// Shortest token a users file may give (16 bytes: guessing is hopeless).
pub const MIN_TOKEN_BYTES: usize = 16;

/// One user and its rights.
pub struct User {
    pub name: String,
    token: Token,
    pub admin: bool,
    /// The locks it may name (an admin may name any).
    locks: GlobSet,
}

impl User {
    /// The user with every right: `--token-file`'s, or everyone's without
    /// authentication.
    pub fn everything(token: Vec<u8>) -> User {
        User {
            name: DEFAULT_USER.to_owned(),
            token: Token::Plain(token),
            admin: true,
            locks: GlobSet::empty(),
        }
    }

    /// Whether it may name lock `name`.
    pub fn may_use(&self, lock: &str) -> bool {
        self.admin || self.locks.is_match(lock)
    }

    /// Why a command naming `lock` is refused: the text after `NOPERM`.
    pub fn refusal(&self, lock: &str) -> String {
        format!("user {} may not use lock {lock:?}", self.name)
    }

    fn token_is(&self, given: &[u8]) -> bool {
        match &self.token {
            // Constant time in the token's content (its length may show).
            Token::Plain(token) => bool::from(token.as_slice().ct_eq(given)),
            Token::Sha256(digest) => {
                let given: [u8; 32] = Sha256::digest(given).into();
                bool::from(digest.ct_eq(&given))
            }
        }
    }
}

/// A user's token, as the file gives it.
#[derive(PartialEq, Eq)]
enum Token {
    Plain(Vec<u8>),
    /// `sha256:HEX`: the token's SHA-256.
    Sha256([u8; 32]),
}

/// The prefix of a hashed token.
const SHA256: &str = "sha256:";

impl Token {
    /// `sha256:` and 64 hex digits, or the token itself (at least
    /// [`MIN_TOKEN_BYTES`]).
    fn parse(name: &str, text: &str) -> Result<Token, String> {
        let Some(hex) = text.strip_prefix(SHA256) else {
            if text.len() < MIN_TOKEN_BYTES {
                return Err(format!(
                    "user {name}: a token of at least {MIN_TOKEN_BYTES} bytes"
                ));
            }
            return Ok(Token::Plain(text.as_bytes().to_vec()));
        };
        let digit = |i: usize| {
            hex.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
        };
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = digit(2 * i).filter(|_| hex.len() == 64).ok_or_else(|| {
                format!("user {name}: {SHA256} needs the 64 hex digits of the token's SHA-256")
            })?;
        }
        Ok(Token::Sha256(digest))
    }
}

/// Everyone who may connect.
pub struct Users {
    by_name: HashMap<String, Arc<User>>,
    /// Whether a connection must authenticate (a users file or a token).
    required: bool,
}

impl Users {
    /// Nobody authenticates: everyone is `default` with every right.
    pub fn open() -> Users {
        Users::of(vec![User::everything(Vec::new())], false)
    }

    /// `--token-file`'s one user.
    pub fn token(token: Vec<u8>) -> Users {
        Users::of(vec![User::everything(token)], true)
    }

    fn of(users: Vec<User>, required: bool) -> Users {
        Users {
            by_name: users
                .into_iter()
                .map(|u| (u.name.clone(), Arc::new(u)))
                .collect(),
            required,
        }
    }

    /// A users file's text; an error names the line and what is wrong.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let user = parse_line(line).map_err(|why| format!("line {}: {why}", n + 1))?;
            if users.iter().any(|u: &User| u.name == user.name) {
                return Err(format!("line {}: user {} twice", n + 1, user.name));
            }
            users.push(user);
        }
        if users.is_empty() {
            return Err("no user".into());
        }
        Ok(Users::of(users, true))
    }

    /// Whether a connection must authenticate.
    pub fn required(&self) -> bool {
        self.required
    }

    /// The user `name` (`default` when none is given) if `token` is its.
    pub fn authenticate(&self, name: Option<&[u8]>, token: &[u8]) -> Option<Arc<User>> {
        let name = name.map_or(Some(DEFAULT_USER), |n| std::str::from_utf8(n).ok())?;
        let user = self.by_name.get(name)?;
        user.token_is(token).then(|| user.clone())
    }

    /// The user called `name` (a client certificate's CN names one).
    pub fn named(&self, name: &str) -> Option<Arc<User>> {
        self.by_name.get(name).cloned()
    }

    /// Whether `token` is an admin's (the metrics listener's Bearer token
    /// off loopback).
    pub fn admin_token(&self, token: &[u8]) -> bool {
        // Every user is compared, so the time does not tell which matched.
        self.by_name
            .values()
            .fold(false, |found, u| (u.admin && u.token_is(token)) | found)
    }

    /// Who a connection is before it authenticates: `default` with every
    /// right when nobody authenticates, else nobody yet.
    pub fn anonymous(&self) -> Option<Arc<User>> {
        (!self.required).then(|| self.by_name.get(DEFAULT_USER).cloned())?
    }
}

/// `NAME TOKEN [admin] [locks=GLOB,GLOB...]`.
fn parse_line(line: &str) -> Result<User, String> {
    let mut words = line.split_whitespace();
    let (Some(name), Some(token)) = (words.next(), words.next()) else {
        return Err("expected NAME TOKEN [admin] [locks=GLOB,...]".into());
    };
    let name_ok = |c: char| c.is_ascii_alphanumeric() || "_-.:@".contains(c);
    if name.len() > 64 || !name.chars().all(name_ok) {
        return Err(format!(
            "user {name:?}: 1 to 64 ASCII letters, digits and \"_-.:@\""
        ));
    }
    let token = Token::parse(name, token)?;
    let (mut admin, mut globs) = (false, GlobSetBuilder::new());
    for word in words {
        match word.split_once('=') {
            None if word == "admin" => admin = true,
            Some(("locks", list)) => {
                for glob in list.split(',').filter(|g| !g.is_empty()) {
                    let glob = Glob::new(glob).map_err(|e| format!("user {name}: {e}"))?;
                    globs.add(glob);
                }
            }
            _ => {
                return Err(format!(
                    "user {name}: {word:?} is not admin or locks=GLOB,..."
                ))
            }
        }
    }
    Ok(User {
        name: name.to_owned(),
        token,
        admin,
        locks: globs.build().map_err(|e| format!("user {name}: {e}"))?,
    })
}

/// The users now, and where they come from (reloaded on SIGHUP).
pub struct Directory {
    users: RwLock<Arc<Users>>,
    file: Option<PathBuf>,
}

impl Directory {
    pub fn new(users: Users, file: Option<PathBuf>) -> Directory {
        Directory {
            users: RwLock::new(Arc::new(users)),
            file,
        }
    }

    /// The users now.
    pub fn now(&self) -> Arc<Users> {
        self.users
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the users file again: how many users it has, and the names
    /// of those it removed or gave another token (their connections must
    /// go), when it read well; else why not (the old ones stay). `None`
    /// when there is no file.
    pub fn reload(&self) -> Option<Result<(usize, Vec<String>), String>> {
        let file = self.file.as_ref()?;
        Some(read_file(file).map(|users| {
            let count = users.by_name.len();
            let mut now = self.users.write().unwrap_or_else(PoisonError::into_inner);
            let mut gone: Vec<String> = now
                .by_name
                .values()
                .filter(|old| {
                    let new = users.by_name.get(&old.name);
                    new.is_none_or(|new| new.token != old.token)
                })
                .map(|old| old.name.clone())
                .collect();
            gone.sort_unstable();
            *now = Arc::new(users);
            (count, gone)
        }))
    }
}

/// The users of the file at `path`.
pub fn read_file(path: &Path) -> Result<Users, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--users {}: {e}", path.display()))?;
    Users::parse(&text).map_err(|why| format!("--users {}: {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# team A and an operator
alice alice-token-0123456789 locks=team-a.*,shared
root  root-token-0123456789 admin
nobody nobody-token-0123456789
";

    #[test]
    fn a_user_may_name_only_the_locks_its_globs_match() {
        let users = Users::parse(FILE).unwrap();
        assert!(users.required());
        let alice = users
            .authenticate(Some(b"alice"), b"alice-token-0123456789")
            .unwrap();
        assert!(alice.may_use("team-a.jobs") && alice.may_use("shared"));
        assert!(!alice.may_use("payments") && !alice.may_use("team-b.jobs"));
        assert_eq!(
            alice.refusal("payments"),
            r#"user alice may not use lock "payments""#
        );
        let root = users
            .authenticate(Some(b"root"), b"root-token-0123456789")
            .unwrap();
        assert!(root.admin && root.may_use("payments"));
        let nobody = users
            .authenticate(Some(b"nobody"), b"nobody-token-0123456789")
            .unwrap();
        assert!(!nobody.may_use("anything"));
    }

    #[test]
    fn a_wrong_token_or_name_authenticates_nobody() {
        let users = Users::parse(FILE).unwrap();
        assert!(users
            .authenticate(Some(b"alice"), b"root-token-0123456789")
            .is_none());
        assert!(users
            .authenticate(Some(b"eve"), b"alice-token-0123456789")
            .is_none());
        assert!(users
            .authenticate(None, b"alice-token-0123456789")
            .is_none());
        assert!(users.anonymous().is_none());
        let token = Users::token(b"t".to_vec());
        assert!(token.authenticate(None, b"t").is_some_and(|u| u.admin));
        assert!(token.authenticate(Some(b"default"), b"t").is_some());
        let open = Users::open();
        assert!(!open.required() && open.anonymous().is_some_and(|u| u.admin));
    }

    #[test]
    fn a_bad_file_names_its_line() {
        let cases = [
            (
                "alice short",
                "line 1: user alice: a token of at least 16 bytes",
            ),
            (
                "alice",
                "line 1: expected NAME TOKEN [admin] [locks=GLOB,...]",
            ),
            (
                "# c\nal/ce alice-token-0123456789",
                r#"line 2: user "al/ce": 1 to 64 ASCII letters, digits and "_-.:@""#,
            ),
            (
                "alice alice-token-0123456789 root",
                r#"line 1: user alice: "root" is not admin or locks=GLOB,..."#,
            ),
            (
                "a aaaaaaaaaaaaaaaaaaaa\na bbbbbbbbbbbbbbbbbbbbbbb",
                "line 2: user a twice",
            ),
            ("# nobody", "no user"),
        ];
        for (text, want) in cases {
            assert_eq!(Users::parse(text).err().as_deref(), Some(want), "{text}");
        }
    }
}
