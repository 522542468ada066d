//! `holdline serve`: one store behind a RESP socket.
//!
//! Start-up: parse and check the flags, raise the descriptor limit, start
//! logging (`HOLDLINE_LOG`, e.g. `debug`; never key text or tokens above
//! debug), bind, print `holdline: listening on ADDR` on stdout, serve until
//! SIGINT or SIGTERM, exit 0.

//! Module map, bottom-up (each module uses only those above it; checked by
//! `tests/module_graph.rs`): `config` (flags), `reply` (error replies in
//! the core's shape), `loss_watch` (which leases were lost), `session` (one
//! connection's state), `parse` (the argument cursor), `docs` (the command
//! table), `cmd` (each command: parse, effect), `connection` (the framed
//! stream), `shutdown` (the signal), `handler` (one connection's life),
//! `server` (the listener).

mod cmd;
mod config;
mod connection;
mod docs;
mod handler;
mod loss_watch;
mod parse;
mod reply;
mod server;
mod session;
mod shutdown;

use clap::Parser;
use config::{Cli, Command};
use holdline::Store;
use session::Shared;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use tracing::{info, warn};

/// Descriptors kept for the listener, logs and the like, beyond connections.
const SPARE_DESCRIPTORS: u64 = 64;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    let config = match args.check() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("holdline: {why}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    let descriptors = raise_descriptor_limit();
    let wanted = config.max_connections as u64 + SPARE_DESCRIPTORS;
    if descriptors.is_some_and(|n| n < wanted) {
        warn!(
            limit = descriptors,
            wanted, "the descriptor limit is below --max-connections; accepts may fail first"
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holdline: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = listen(config.listen)
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // The one line on stdout: scripts and tests read the port from it.
        println!("holdline: listening on {local}");
        let _ = std::io::stdout().flush();
        info!(
            %local,
            auth = config.token.is_some(),
            max_connections = config.max_connections,
            max_frame = config.max_frame,
            "serving"
        );
        let shared = Arc::new(Shared::new(Store::new(), config.token, config.max_frame));
        server::run(listener, shared, config.max_connections)
            .await
            .map_err(|e| e.to_string())
    });
    // Connections still writing to clients that do not read are not
    // waited for past the grace the server gave them.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("holdline: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Room for connections the kernel completed before they were accepted: a
/// burst of thousands of clients (each waiter is a connection) would
/// otherwise overflow tokio's default of 1024 and stall in SYN retries.
const LISTEN_BACKLOG: u32 = 4096;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // A restarted server can listen again while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HOLDLINE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Raises the soft limit on open descriptors to the hard one: each
/// connection is one, and the default soft limit (often 1024) is far below
/// `--max-connections`. Answers the soft limit in force.
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return limit.maximum;
        }
    }
    limit.current
}
