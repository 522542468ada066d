//! One configuration, three ways: a flag beats its variable, which beats
//! the `--config` file, which beats the default; `--print-config` says
//! which gave each value; an unknown key or a bad value exits 2 naming it.

mod common;

use common::TempFile;
use std::process::{Command, Output};

/// `holdline serve ARGS...` with `env` set, run to its end.
fn serve(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdline"));
    cmd.arg("serve").args(args);
    for var in ["HOLDLINE_LOG", "HOLDLINE_CORES", "HOLDLINE_MAX_CONNECTIONS"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The line `--print-config` prints for `key`.
fn line<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")) || l.starts_with(&format!("# {key} ")))
        .unwrap_or_else(|| panic!("no line for {key}: {printed}"))
}

#[test]
fn a_flag_beats_its_variable_which_beats_the_file_which_beats_the_default() {
    let file = TempFile::new(
        "holdline.toml",
        "max-connections = 30\ncores = 3\nmax-output = \"1mb\"\nlog-format = \"json\"\n",
    );
    let config = file.path.as_str();
    let env = [
        ("HOLDLINE_MAX_CONNECTIONS", "20"),
        ("HOLDLINE_CORES", "2"),
        ("HOLDLINE_LOG", "warn"),
    ];
    let flags = [
        "--config",
        config,
        "--print-config",
        "--max-connections",
        "10",
    ];
    let out = serve(&flags, &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = stdout(&out);
    let from_file = format!("# file {config}");
    for (key, expected) in [
        (
            "max-connections",
            "max-connections = \"10\"  # flag".to_owned(),
        ),
        ("cores", "cores = \"2\"  # env HOLDLINE_CORES".to_owned()),
        (
            "log-level",
            "log-level = \"warn\"  # env HOLDLINE_LOG".to_owned(),
        ),
        ("max-output", format!("max-output = \"1mb\"  {from_file}")),
        ("log-format", format!("log-format = \"json\"  {from_file}")),
        ("max-frame", "max-frame = \"524288\"  # default".to_owned()),
        ("token-file", "# token-file not set  # default".to_owned()),
    ] {
        assert_eq!(line(&printed, key), expected, "{printed}");
    }
    // What it prints is a file `--config` takes, and gives the same.
    let again = TempFile::new("printed.toml", &printed);
    let out = serve(&["--config", &again.path, "--print-config"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reprinted = stdout(&out);
    assert_eq!(
        line(&reprinted, "max-connections"),
        format!("max-connections = \"10\"  # file {}", again.path)
    );
}

/// The flags given, the variables set, and the whole of stderr.
type Refused<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, String);

#[test]
fn an_unknown_key_or_a_bad_value_exits_2_naming_it() {
    let unknown = TempFile::new(
        "unknown.toml",
        "listen = \"127.0.0.1:0\"\nmax-conections = 5\n",
    );
    let bad = TempFile::new("bad.toml", "max-output = \"12\"\n");
    let wrong_type = TempFile::new("type.toml", "cores = \"many\"\n");
    let table = TempFile::new("table.toml", "[listen]\nport = 1\n");
    let cases: [Refused; 6] = [
        (
            vec!["--config", &unknown.path],
            vec![],
            format!(
                "holdline: --config {}: unknown key \"max-conections\"\n",
                unknown.path
            ),
        ),
        (
            vec!["--config", &bad.path],
            vec![],
            format!(
                "holdline: max-output in {} \"12\": expected a size of at least 1kb, \
                 such as 8mb or 512kb\n",
                bad.path
            ),
        ),
        (
            vec!["--config", &wrong_type.path],
            vec![],
            format!(
                "holdline: --config {}: cores = \"many\": invalid value 'many' for \
                 '--cores <N>': invalid digit found in string\n",
                wrong_type.path
            ),
        ),
        (
            vec!["--config", &table.path],
            vec![],
            format!(
                "holdline: --config {}: listen: expected a string, a number or a boolean\n",
                table.path
            ),
        ),
        (
            vec![],
            vec![("HOLDLINE_MAX_CONNECTIONS", "0")],
            "holdline: HOLDLINE_MAX_CONNECTIONS \"0\": invalid value '0' for \
             '--max-connections <N>': 0 is not in 1..18446744073709551615\n"
                .to_owned(),
        ),
        (
            vec![],
            vec![("HOLDLINE_MAX_TTL", "2h")],
            "holdline: HOLDLINE_MAX_TTL \"2h\": expected a duration from 100ms to 3600s, \
             such as 10s or 2500ms\n"
                .to_owned(),
        ),
    ];
    for (args, env, expected) in cases {
        let mut args = args;
        args.extend(["--listen", "127.0.0.1:0"]);
        let out = serve(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        assert_eq!(stderr(&out), expected, "{args:?} {env:?}");
    }
}
