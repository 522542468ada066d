//! `cargo run --release --manifest-path tools/etcd-codegen/Cargo.toml
//! [-- --check]`: the vendored etcd-client's gRPC code
//! (`vendor/etcd-client/src/rpc/generated/`), made from its
//! `.proto` files with protox (a protobuf compiler in Rust) and tonic's
//! generator, so that building holdline needs no protoc.
//!
//! Without `--check` it writes the files; with `--check` it writes them
//! to a scratch folder and exits 1 naming any committed file that differs
//! (CI runs that: the committed code is what these protos make).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The protos etcd-client's own build script compiles, under `proto/`.
const PROTOS: [&str; 5] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];

/// The generated files etcd-client includes, one per protobuf package.
const PACKAGES: [&str; 5] = [
    "authpb",
    "etcdserverpb",
    "mvccpb",
    "v3electionpb",
    "v3lockpb",
];

fn vendored() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vendor/etcd-client")
}

/// Compiles the protos into `out`: clients only (etcd-client's default).
fn generate(out: &Path) -> Result<(), String> {
    let root = vendored().join("proto");
    let fds = protox::compile(PROTOS, [&root]).map_err(|e| format!("protox: {e}"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    tonic_prost_build::configure()
        .build_server(false)
        .emit_rerun_if_changed(false)
        .out_dir(out)
        .compile_fds(fds)
        .map_err(|e| format!("tonic-prost-build: {e}"))?;
    // The options' packages (google.api, openapiv2) come out too; nothing
    // includes them.
    let entries = std::fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !PACKAGES.iter().any(|p| name == format!("{p}.rs")) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// The committed files that differ from (or are missing in) `fresh`.
fn stale(fresh: &Path, committed: &Path) -> Vec<String> {
    PACKAGES
        .iter()
        .map(|p| format!("{p}.rs"))
        .filter(|f| std::fs::read(fresh.join(f)).ok() != std::fs::read(committed.join(f)).ok())
        .collect()
}

fn main() -> ExitCode {
    let check = std::env::args().skip(1).any(|a| a == "--check");
    let committed = vendored().join("src/rpc/generated");
    let out = if check {
        std::env::temp_dir().join(format!("etcd-codegen-{}", std::process::id()))
    } else {
        committed.clone()
    };
    if let Err(why) = generate(&out) {
        eprintln!("etcd-codegen: {why}");
        return ExitCode::FAILURE;
    }
    if !check {
        println!("etcd-codegen: wrote {}", committed.display());
        return ExitCode::SUCCESS;
    }
    let differ = stale(&out, &committed);
    let _ = std::fs::remove_dir_all(&out);
    if differ.is_empty() {
        println!("etcd-codegen: the committed etcd gRPC code is current");
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "etcd-codegen: {} differ from what the protos make: run `cargo run --release --manifest-path tools/etcd-codegen/Cargo.toml`",
            differ.join(", ")
        );
        ExitCode::FAILURE
    }
}
