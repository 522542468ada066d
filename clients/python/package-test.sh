#!/usr/bin/env bash
# The Python package as a user gets it: `python -m build` makes the sdist
# and the wheel, each is installed into a fresh venv (nothing else in it),
# imported as holdline_client, and used against a real holdline serve: a
# key held, its fence checked, the lease released.
#   bash clients/python/package-test.sh [HOLDLINE_BIN]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-target/release/holdline}")
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release --bin holdline"; exit 1; }
work=target/py-package
rm -rf "$work"
mkdir -p "$work"
python3 -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q build
"$work/build-env/bin/python" -m build --outdir "$work/dist" clients/python >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/holdline_client-*.whl)
sdist=$(ls "$work"/dist/holdline_client-*.tar.gz)
echo "built $(basename "$wheel") $(basename "$sdist")"
# The wheel holds the package and its py.typed marker, and no tests.
listing=$(python3 -m zipfile -l "$wheel")
grep -q 'holdline_client/py.typed' <<<"$listing" || { echo "no py.typed in the wheel"; exit 1; }
if grep -q 'tests/' <<<"$listing"; then echo "tests in the wheel"; exit 1; fi

out=$work/server.out
"$bin" serve --listen 127.0.0.1:0 >"$out" 2>"$out.err" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
addr=
for _ in $(seq 100); do
    addr=$(sed -n 's/^holdline: listening on //p' "$out")
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "the server printed no address"; exit 1; }

for artifact in "$wheel" "$sdist"; do
    venv=$work/venv-$(basename "$artifact" | sed 's/.*\.\(whl\|tar\.gz\)$/\1/')
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --no-deps "$artifact"
    # Run from the venv's own directory: nothing of the repository on sys.path.
    (cd "$venv" && bin/python - "$addr" <<'PY'
import asyncio
import sys

import holdline_client


async def main() -> None:
    assert "site-packages" in (holdline_client.__file__ or ""), holdline_client.__file__
    async with holdline_client.connect(sys.argv[1]) as store:
        invoices = store.lock("invoices", ttl="10s")
        async with invoices.hold("inv-9") as lease:
            assert lease.fence > 0, lease.fence
            fence = lease.fence
    print(f"{holdline_client.__name__}: held inv-9 under fence {fence}")


asyncio.run(main())
PY
    ) || { echo "the package from $(basename "$artifact") failed"; exit 1; }
done
