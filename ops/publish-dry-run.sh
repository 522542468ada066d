#!/usr/bin/env bash
# `cargo publish --dry-run` of every crate the workspace publishes, as one
# multi-package publish (cargo 1.90+): each is packaged with its metadata
# checked (description, license, repository, readme, keywords,
# categories; every path dependency with a version), and holdline,
# holdline-resp and holdline-client are each built from their packaged
# tarball, the unpublished siblings they need resolved from the tarballs
# made just before them.
#
# holdline-server is packaged (a second run, with its siblings, which a
# lone -p holdline-server cannot resolve from crates.io) with --no-verify: verifying builds the
# tarball as crates.io users get it, with crates.io's etcd-client, whose
# build script runs protoc (the workspace builds the vendored copy with
# its gRPC code committed, vendor/etcd-client/VENDORED.md, through
# [patch.crates-io], which a published crate does not carry). The code is
# the same; the workspace build and tests compiled it. So `cargo install
# holdline-server` needs protoc (Debian: protobuf-compiler); the image
# (ops/container) and a build from this repository do not.
#   bash ops/publish-dry-run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The tarballs made in this run are served to the verify builds from a
# local registry whose extracted sources cargo keeps under
# $CARGO_HOME/registry/src/-<hash of the registry's path>/ and never
# re-extracts: a second run from the same checkout path builds the first
# run's sources. Those folders hold only this workspace's crates; clear
# them so every run verifies the code it just packaged.
for stale in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/holdline*; do
    [ -e "$stale" ] && rm -rf "$stale"
done
cargo publish --dry-run --allow-dirty --locked -p holdline -p holdline-resp -p holdline-client
cargo publish --dry-run --allow-dirty --locked --no-verify \
    -p holdline -p holdline-resp -p holdline-client -p holdline-server
