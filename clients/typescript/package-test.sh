#!/usr/bin/env bash
# The TypeScript package as a user gets it: `npm pack` (which builds ESM
# and CommonJS), the tarball installed into three fresh projects, each
# against a real holdline serve:
#   esm/  "type": "module", `import { connect } from 'holdline'`: a key held
#   cjs/  CommonJS, `require('holdline')`: a key held; and a .ts file
#         compiled to CommonJS against the require condition's types
#   ts/   the README's recipe word for word ("Running a .ts file"): its
#         tsconfig.json, the README's first example as main.ts, typescript
#         and @types/node from npm, `npx tsc && node dist/main.js`
#   bash clients/typescript/package-test.sh [HOLDLINE_BIN]
# Needs node and npm (and the npm registry, for typescript and @types/node).
set -euo pipefail
cd "$(dirname "$0")"
bin=$(realpath "${1:-../../target/release/holdline}")
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release --bin holdline"; exit 1; }
work=$(realpath -m ../../target/ts-package)
rm -rf "$work"
mkdir -p "$work"
[ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null
npm pack --silent --pack-destination "$work" >/dev/null
tarball=$(ls "$work"/holdline-*.tgz)
contents=$(tar -tzf "$tarball")
for f in package/dist/src/index.js package/dist/src/index.d.ts package/dist/cjs/index.js package/dist/cjs/index.d.ts package/dist/cjs/package.json; do
    grep -qx "$f" <<<"$contents" || { echo "$f is not in $(basename "$tarball")"; exit 1; }
done
if grep -q '^package/dist/test/' <<<"$contents"; then echo "tests in the tarball"; exit 1; fi
echo "packed $(basename "$tarball"): $(wc -l <<<"$contents") files"

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

project() { # DIR TYPE: a fresh project of that module type, the tarball installed
    mkdir -p "$1"
    printf '{ "name": "try-%s", "version": "1.0.0", "private": true, "type": "%s" }\n' "$2" "$2" >"$1/package.json"
    (cd "$1" && npm install --no-audit --no-fund --silent "$tarball")
}

project "$work/esm" module
cat >"$work/esm/main.js" <<'JS'
import { connect, Lease } from 'holdline'
const store = await connect(process.argv[2])
try {
	const fence = await store.lock('invoices').hold('inv-9', lease => {
		if (!(lease instanceof Lease)) throw new Error('not a Lease')
		return lease.fence
	})
	if (typeof fence !== 'bigint') throw new Error(`fence ${fence} is no bigint`)
	console.log(`esm: held inv-9 under fence ${fence}`)
} finally {
	await store.close()
}
JS
(cd "$work/esm" && node main.js "$addr")

project "$work/cjs" commonjs
cat >"$work/cjs/main.js" <<'JS'
const { connect, bigintsAsText } = require('holdline')
async function main() {
	const store = await connect(process.argv[2])
	try {
		const line = await store.lock('invoices').hold('inv-9', lease => JSON.stringify({ fence: lease.fence }, bigintsAsText))
		if (!/^\{"fence":"\d+"\}$/.test(line)) throw new Error(`unexpected ${line}`)
		console.log(`cjs: held inv-9, logged ${line}`)
	} finally {
		await store.close()
	}
}
main().catch(e => {
	console.error(e)
	process.exit(1)
})
JS
(cd "$work/cjs" && node main.js "$addr")
# The same from TypeScript compiled to CommonJS: the require condition's types.
cat >"$work/cjs/typed.ts" <<'TS'
import { bigintsAsText, connect, type Lease } from 'holdline'
export async function fenceText(addr: string): Promise<string> {
	const store = await connect(addr)
	try {
		return await store.lock('invoices').hold('inv-9', (lease: Lease) => JSON.stringify(lease.fence, bigintsAsText))
	} finally {
		await store.close()
	}
}
TS
printf '{ "compilerOptions": { "module": "Node16", "moduleResolution": "Node16", "target": "ES2022", "strict": true, "types": ["node"], "typeRoots": ["%s"] }, "files": ["typed.ts"] }\n' \
    "$PWD/node_modules/@types" >"$work/cjs/tsconfig.json"
(cd "$work/cjs" && "$OLDPWD/node_modules/.bin/tsc" -p . && grep -q "require(\"holdline\")" typed.js &&
    node -e 'require("./typed.js").fenceText(process.argv[1]).then(t => console.log("cjs (TypeScript): fence " + t))' "$addr")

# The README's recipe: its commands, its tsconfig.json, its first example.
block() { # the first fenced block of LANG after the line matching START
    awk -v start="$1" -v lang="$2" '
        index($0, start) == 1 { found = 1 }
        found && !inside && $0 == "```" lang { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' README.md
}
mkdir -p "$work/ts"
block '### Running a .ts file' json >"$work/ts/tsconfig.json"
block '## The example' ts | sed "s/127\.0\.0\.1:7380/$addr/" >"$work/ts/main.ts"
if ! [ -s "$work/ts/tsconfig.json" ] || ! [ -s "$work/ts/main.ts" ]; then
    echo "the README's recipe blocks were not found"; exit 1
fi
(
    cd "$work/ts"
    npm init -y >/dev/null && npm pkg set type=module
    npm install --no-audit --no-fund --silent "$tarball"
    npm install --no-audit --no-fund --silent --save-dev typescript@5 @types/node@20
    npx tsc && node dist/main.js
) >"$work/ts.out" 2>&1 || { cat "$work/ts.out"; exit 1; }
grep -q '^paid under fence [0-9]' "$work/ts.out" || { echo "the README's example printed:"; cat "$work/ts.out"; exit 1; }
echo "ts: the README's recipe ran main.ts: $(tr '\n' ' ' <"$work/ts.out")"
