#!/usr/bin/env bash
# Builds the server's image from a release binary already built:
#   bash ops/container/build.sh [HOLDLINE_BIN] [TAG]
# (defaults: target/release/holdline, localhost/holdline:<server version>).
# Stages target/container/rootfs: the binary, every library ldd names (the
# dynamic loader included, at the paths the binary asks for), /etc/passwd
# and /etc/group with the user 65532 (holdline), /etc/nsswitch.conf and
# /etc/hosts for name lookups (glibc >= 2.34 has files and dns built in),
# an empty /tmp; the binary without its debug info (strip --strip-debug,
# when binutils is there). Then `podman build` with ops/container/Containerfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/holdline}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' server/Cargo.toml | head -n1)
tag=${2:-localhost/holdline:$version}
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release --bin holdline"; exit 1; }

ctx=target/container
rm -rf "$ctx"
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/holdline"
# The release profile keeps line tables (debug = 1) for profiling: the
# image does without them (symbols stay, so backtraces still name functions).
if command -v strip >/dev/null; then strip --strip-debug "$root/usr/local/bin/holdline"; fi
# ldd's lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libs" ] || { echo "ldd named no library for $bin (static?)"; }
for lib in $libs; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/:/sbin/nologin
holdline:x:65532:65532:holdline:/:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
holdline:x:65532:
GROUP
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
cp ops/container/Containerfile "$ctx/Containerfile"
echo "staged $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1)"
podman build --quiet --tag "$tag" --file "$ctx/Containerfile" "$ctx"
echo "built $tag"
