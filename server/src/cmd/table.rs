//! COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS: the command table
//! redis-cli asks for its argument hints.

use super::unknown_subcommand;
use crate::docs;
use crate::parse::Parse;
use holdline_resp::Value;

/// What a `COMMAND` asks.
#[derive(Debug, PartialEq)]
pub enum Query {
    All,
    Count,
    Docs(Vec<Vec<u8>>),
    Info(Vec<Vec<u8>>),
}

impl Query {
    pub fn parse(p: &mut Parse) -> Result<Query, String> {
        let Some(sub) = p.next_if_any() else {
            return Ok(Query::All);
        };
        p.subcommand(&sub);
        match sub.to_ascii_uppercase().as_slice() {
            b"COUNT" => Ok(Query::Count),
            b"DOCS" => Ok(Query::Docs(p.rest())),
            b"INFO" => Ok(Query::Info(p.rest())),
            _ => Err(unknown_subcommand(&sub, "COMMAND")),
        }
    }

    pub fn apply(self) -> Value {
        match self {
            Query::All => docs::info(&[]),
            Query::Count => docs::count(),
            Query::Docs(names) => docs::docs(&names),
            Query::Info(names) => docs::info(&names),
        }
    }
}
