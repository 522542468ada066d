#!/usr/bin/env bash
# CI for the image: build it from the release binary already built, export
# its tree (`podman run` cannot start containers in CI's sandbox: crun may
# not set RLIMIT_NOFILE there), run its ENTRYPOINT from that tree under
# chroot as its USER, hold a key from outside with redis-cli, and stop it.
#   bash ops/container/test.sh [HOLDLINE_BIN]
# Needs root (chroot, podman's storage); installs podman when missing
# (Debian: `podman` alone: `podman build` has buildah inside it, and a
# FROM scratch image with COPY only runs no container to build).
set -euo pipefail
cd "$(dirname "$0")/../.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
bin=${1:-target/release/holdline}
tag=localhost/holdline:ci

if ! command -v podman >/dev/null; then
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends podman >/dev/null
fi
command -v redis-cli >/dev/null || { echo "no redis-cli: apt-get install redis-tools"; exit 1; }

as_root bash ops/container/build.sh "$bin" "$tag"

user=$(as_root podman image inspect --format '{{.Config.User}}' "$tag")
entry=$(as_root podman image inspect --format '{{json .Config.Entrypoint}}' "$tag")
echo "image: user $user, entrypoint $entry"
[ "$user" = 65532:65532 ] || { echo "the image's user is $user, not 65532:65532"; exit 1; }
[ "$entry" = '["/usr/local/bin/holdline","serve"]' ] || { echo "unexpected entrypoint: $entry"; exit 1; }

tree=$(mktemp -d)
chmod 755 "$tree"   # mktemp makes it 0700: the image's user must enter it
pid=
cleanup() {
    [ -z "$pid" ] || as_root kill -KILL "$pid" 2>/dev/null || true
    as_root rm -rf "$tree"
}
trap cleanup EXIT
cid=$(as_root podman create "$tag")
as_root podman export "$cid" | as_root tar -x -C "$tree"
as_root podman rm "$cid" >/dev/null
grep -q '^holdline:x:65532:65532:' "$tree/etc/passwd" || { echo "no user 65532 in /etc/passwd"; exit 1; }

# The image's own tree, its own libraries, as its own user: the entrypoint
# with a free loopback port instead of the image's CMD.
out=$tree.out
# (No function in the background: $! must be chroot's own pid, which
# becomes the server's, or sudo's, which passes SIGTERM on.)
sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
"${sudo[@]}" chroot --userspec="$user" "$tree" /usr/local/bin/holdline serve --listen 127.0.0.1:0 >"$out" 2>"$out.err" &
pid=$!
addr=
for _ in $(seq 100); do
    addr=$(sed -n 's/^holdline: listening on //p' "$out")
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "the server exited:"; cat "$out" "$out.err"; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { echo "no address printed in 10 s:"; cat "$out" "$out.err"; exit 1; }
echo "serving on $addr from the image's tree"
server_pid=$(pgrep -P "$pid" -x holdline || echo "$pid")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$server_pid/status")
[ "$uid" = 65532 ] || { echo "the server runs as uid $uid, not 65532"; exit 1; }

answer=$(redis-cli -h "${addr%:*}" -p "${addr##*:}" HOLD invoices inv-9 TTL 10000)
echo "HOLD invoices inv-9 TTL 10000 -> $(echo "$answer" | tr '\n' ' ')"
lines=$(echo "$answer" | wc -l)
lease=$(echo "$answer" | sed -n 1p)
fence=$(echo "$answer" | sed -n 2p)
if [ "$lines" != 2 ] || [ "$lease" != 1 ] || ! [[ "$fence" =~ ^[0-9]+$ ]]; then
    echo "expected a lease id 1 and a fence"; exit 1
fi

as_root kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" = 0 ] || { echo "the server exited $status on SIGTERM:"; cat "$out.err"; exit 1; }
rm -f "$out" "$out.err"
echo "stopped on SIGTERM, exit 0"
as_root podman rmi "$tag" >/dev/null
