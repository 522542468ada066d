//! One configuration, three ways: every flag of a subcommand can also be
//! set by an environment variable (`HOLDLINE_` + the flag's name in
//! capitals, `-` as `_`: clap's `env`) and by a TOML file (`--config`,
//! keys the flags' names), in that order of precedence, then the default.
//!
//! The file is read after a first parse of the command line and the
//! environment: each of its keys that neither set is checked by the
//! flag's own value parser, then handed to clap as that flag, so every
//! rule the flags obey (ranges, conflicts, requirements) holds for it too.
//! [`Sources`] remembers where each value came from, for error messages
//! and `--print-config`.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command, FromArgMatches};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Every variable's prefix.
const ENV_PREFIX: &str = "HOLDLINE_";
/// The flag naming the file, and the flags the file may not set.
const CONFIG: &str = "config";
const NOT_IN_FILE: [&str; 2] = [CONFIG, "print-config"];
/// What `--print-config` shows for a secret's value.
const MASKED: &str = "********";

/// The variable that sets flag `long`: `max-connections` is
/// `HOLDLINE_MAX_CONNECTIONS`.
pub fn env_name(long: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        long.to_ascii_uppercase().replace('-', "_")
    )
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(String),
    File(PathBuf),
    Default,
    /// Neither given nor defaulted by clap: the program decides.
    Unset,
}

/// One flag's effective value and its source.
#[derive(Clone, Debug)]
struct Setting {
    long: String,
    value: Option<String>,
    source: Source,
}

/// Where each flag's value came from, in the command's order.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    settings: Vec<Setting>,
}

impl Sources {
    /// How an error names the setting `long`: its variable, its key in the
    /// file, or its flag.
    pub fn label(&self, long: &str) -> String {
        match self
            .settings
            .iter()
            .find(|s| s.long == long)
            .map(|s| &s.source)
        {
            Some(Source::Env(var)) => var.clone(),
            Some(Source::File(path)) => format!("{long} in {}", path.display()),
            _ => format!("--{long}"),
        }
    }

    /// The effective configuration as TOML a `--config` file takes, each
    /// line saying where its value came from; secrets masked.
    pub fn print(&self) -> String {
        let mut out = String::from("# the effective configuration (flag > env > file > default)\n");
        for s in self
            .settings
            .iter()
            .filter(|s| !NOT_IN_FILE.contains(&&*s.long))
        {
            let source = match &s.source {
                Source::Flag => "flag".to_owned(),
                Source::Env(var) => format!("env {var}"),
                Source::File(path) => format!("file {}", path.display()),
                Source::Default | Source::Unset => "default".to_owned(),
            };
            let line = match &s.value {
                Some(_) if is_secret(&s.long) => format!("{} = \"{MASKED}\"", s.long),
                Some(v) => format!("{} = {}", s.long, toml_string(v)),
                None => format!("# {} not set", s.long),
            };
            out.push_str(&format!("{line}  # {source}\n"));
        }
        out
    }
}

/// A value never printed: a password or a token itself (a file's path is
/// fine to show).
fn is_secret(long: &str) -> bool {
    long.ends_with("password") || long.ends_with("token")
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Why the command line was not taken: clap's own refusal (help and
/// version too, printed and exited by clap), or ours, to print and exit 2.
#[derive(Debug)]
pub enum Refusal {
    Clap(clap::Error),
    Refused(String),
}

/// `command` with every flag of its subcommand `sub` also read from its
/// variable.
pub fn with_env(command: Command, sub: &str) -> Command {
    command.mut_subcommand(sub, |s| {
        s.mut_args(|a| match a.get_long().map(env_name) {
            Some(var) => a.env(var),
            None => a,
        })
    })
}

/// Parses `argv` for `command` (built by [`with_env`]): the flags, the
/// variables (`aliases` are older names of some: (variable, flag),
/// weaker than the flag's own variable), then `--config`'s file.
pub fn parse<T: FromArgMatches>(
    command: Command,
    sub: &str,
    argv: Vec<OsString>,
    aliases: &[(&str, &str)],
) -> Result<(T, Sources), Refusal> {
    let mut command = command;
    command.build();
    let serve = command
        .find_subcommand(sub)
        .expect("the subcommand exists")
        .clone();
    // Lenient: what the file adds may satisfy a flag's requirements. What
    // even this refuses (help, version, no subcommand) is said by the
    // strict parse, with its usage.
    let lenient = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&argv);
    let first = match lenient {
        Ok(first) if first.subcommand_matches(sub).is_some() => first,
        _ => {
            let strict = command.try_get_matches_from(&argv);
            let matches = strict.map_err(|e| from_env(&serve, &argv, e))?;
            let parsed = T::from_arg_matches(&matches).map_err(Refusal::Clap)?;
            return Ok((parsed, Sources::default()));
        }
    };
    let given = first.subcommand_matches(sub).expect("matched above");
    let mut layers = Layers::default();
    layers.aliases(&serve, given, aliases)?;
    if let Some(path) = given.get_one::<PathBuf>(CONFIG) {
        layers.file(&serve, given, path)?;
    }
    let mut all = argv.clone();
    all.extend(layers.extra.iter().cloned());
    let matches = command
        .try_get_matches_from(&all)
        .map_err(|e| from_env(&serve, &argv, e))?;
    let parsed = T::from_arg_matches(&matches).map_err(Refusal::Clap)?;
    let given = matches.subcommand_matches(sub).expect("parsed again");
    Ok((parsed, layers.sources(&serve, given)))
}

/// What the variable aliases and the file add to the command line.
#[derive(Default)]
struct Layers {
    /// `--flag=value` arguments appended.
    extra: Vec<OsString>,
    /// The flags they set, and from where.
    set: HashMap<String, Source>,
}

impl Layers {
    /// Older variables, for flags neither given nor set by their own.
    fn aliases(
        &mut self,
        serve: &Command,
        given: &ArgMatches,
        aliases: &[(&str, &str)],
    ) -> Result<(), Refusal> {
        for &(var, long) in aliases {
            let Some(value) = std::env::var_os(var) else {
                continue;
            };
            if !self.open(serve, given, long) {
                continue;
            }
            let value = value.to_string_lossy().into_owned();
            check_value(serve, long, &value)
                .map_err(|why| Refusal::Refused(format!("{var} {value:?}: {why}")))?;
            self.add(serve, long, &value, Source::Env(var.to_owned()));
        }
        Ok(())
    }

    /// The file's keys, each a flag neither given nor set by a variable.
    fn file(&mut self, serve: &Command, given: &ArgMatches, path: &Path) -> Result<(), Refusal> {
        let at = |why: String| Refusal::Refused(format!("--config {}: {why}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| at(e.message().to_owned()))?;
        for (key, value) in &table {
            let known = serve.get_arguments().any(|a| {
                a.get_long() == Some(key.as_str()) && !NOT_IN_FILE.contains(&key.as_str())
            });
            if !known {
                return Err(at(format!("unknown key {key:?}")));
            }
            let value = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(at(format!(
                        "{key}: expected a string, a number or a boolean"
                    )))
                }
            };
            check_value(serve, key, &value)
                .map_err(|why| at(format!("{key} = {value:?}: {why}")))?;
            if self.open(serve, given, key) {
                self.add(serve, key, &value, Source::File(path.to_owned()));
            }
        }
        Ok(())
    }

    /// Whether flag `long` is still at its default: neither on the command
    /// line, nor set by its variable, nor by an earlier layer.
    fn open(&self, serve: &Command, given: &ArgMatches, long: &str) -> bool {
        let Some(arg) = serve.get_arguments().find(|a| a.get_long() == Some(long)) else {
            return false;
        };
        let by_user = matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        !by_user && !self.set.contains_key(long)
    }

    fn add(&mut self, serve: &Command, long: &str, value: &str, source: Source) {
        let takes_value = serve
            .get_arguments()
            .any(|a| a.get_long() == Some(long) && a.get_action().takes_values());
        match value {
            _ if takes_value => self.extra.push(format!("--{long}={value}").into()),
            "true" => self.extra.push(format!("--{long}").into()),
            _ => {}
        }
        self.set.insert(long.to_owned(), source);
    }

    /// Each flag's value and source once every layer is in.
    fn sources(&self, serve: &Command, given: &ArgMatches) -> Sources {
        let settings = serve
            .get_arguments()
            .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::HelpLong))
            .filter_map(|a| {
                let long = a.get_long()?.to_owned();
                let id = a.get_id().as_str();
                let value = given
                    .get_raw(id)
                    .and_then(|mut v| v.next())
                    .map(|v| v.to_string_lossy().into_owned());
                let source = match (self.set.get(&long), given.value_source(id)) {
                    (Some(layer), _) => layer.clone(),
                    (None, Some(ValueSource::CommandLine)) => Source::Flag,
                    (None, Some(ValueSource::EnvVariable)) => Source::Env(env_name(&long)),
                    (None, Some(ValueSource::DefaultValue)) => Source::Default,
                    (None, _) => Source::Unset,
                };
                Some(Setting {
                    long,
                    value,
                    source,
                })
            })
            .collect();
        Sources { settings }
    }
}

/// `value` read by flag `long`'s own parser (on a command of that flag
/// alone, so no other flag's rule applies): clap's reason when refused.
fn check_value(serve: &Command, long: &str, value: &str) -> Result<(), String> {
    let arg = serve
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .expect("a known flag");
    let mut alone = clap::Arg::new(arg.get_id().clone())
        .long(long.to_owned())
        .action(arg.get_action().clone())
        .value_parser(arg.get_value_parser().clone());
    if let Some(names) = arg.get_value_names() {
        alone = alone.value_names(names.to_vec());
    }
    let argv = if arg.get_action().takes_values() {
        vec![format!("--{long}={value}")]
    } else {
        match value {
            "true" => vec![format!("--{long}")],
            "false" => vec![],
            _ => return Err("expected true or false".to_owned()),
        }
    };
    Command::new("holdline")
        .no_binary_name(true)
        .arg(alone)
        .try_get_matches_from(argv)
        .map(drop)
        .map_err(|e| reason(&e))
}

/// Clap's refusal without its `error: ` and its advice.
fn reason(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// A refusal of a value that came from a variable names the variable.
fn from_env(serve: &Command, argv: &[OsString], e: clap::Error) -> Refusal {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return Refusal::Clap(e);
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return Refusal::Clap(e);
    };
    let long = arg
        .trim_start_matches("--")
        .split([' ', '='])
        .next()
        .unwrap_or_default();
    let flag = format!("--{long}");
    let on_line = argv.iter().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&format!("{flag}="))
    });
    let var = env_name(long);
    match std::env::var(&var) {
        Ok(value) if !on_line && serve.get_arguments().any(|a| a.get_long() == Some(long)) => {
            Refusal::Refused(format!("{var} {value:?}: {}", reason(&e)))
        }
        _ => Refusal::Clap(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_secrets() {
        assert_eq!(env_name("max-connections"), "HOLDLINE_MAX_CONNECTIONS");
        let sources = Sources {
            settings: vec![
                Setting {
                    long: "etcd-password".into(),
                    value: Some("hunter2".into()),
                    source: Source::Env("HOLDLINE_ETCD_PASSWORD".into()),
                },
                Setting {
                    long: "token-file".into(),
                    value: Some("/etc/holdline/token".into()),
                    source: Source::Flag,
                },
            ],
        };
        assert_eq!(
            sources.print(),
            "# the effective configuration (flag > env > file > default)\n\
             etcd-password = \"********\"  # env HOLDLINE_ETCD_PASSWORD\n\
             token-file = \"/etc/holdline/token\"  # flag\n"
        );
        assert_eq!(sources.label("etcd-password"), "HOLDLINE_ETCD_PASSWORD");
        assert_eq!(sources.label("listen"), "--listen");
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }
}
