/**
 * The README's TypeScript snippets, compiled and run as written against a
 * real server (only its address put in for `127.0.0.1:7380`). A snippet
 * that speaks TLS (`tls:`) runs against a TLS server whose CA is `ca.pem`
 * in its working folder; one that names `127.0.0.1:7001` (and `:7002`, ...)
 * against a real cluster, node N's address put in for `127.0.0.1:700N`; one
 * that connects as `alice` against a server started with `--users`. Each `// prints: TEXT` comment is a line the
 * snippet must print, in order; a TEXT ending in `…` is the start of that
 * line.
 */

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import * as fs from 'node:fs'
import * as path from 'node:path'
import { promisify } from 'node:util'
import { sharedTlsServers } from './certs.js'
import { startCluster, type Cluster } from './cluster.js'
import { REPO, startServerWithFile, type Server } from './server.js'

const run = promisify(execFile)
const PACKAGE = path.join(REPO, 'clients/typescript')
/** Inside the package, so that `import ... from 'holdline'` resolves to it by its own name. */
const DIR = path.join(PACKAGE, 'dist/readme')

/** A plain server, and a TLS one whose CA the snippets trust. */
const shared = sharedTlsServers()
let usersServer: Server
let cluster: Cluster
before(async () => {
	usersServer = await startServerWithFile('--users', 'alice alice-token-0123456789 locks=team-a.*\n')
	cluster = await startCluster()
})
after(async () => {
	await usersServer?.stop()
	await cluster?.stop()
})

/** Whether a snippet speaks TLS. */
const speaksTls = (snippet: string) => /\btls:/.test(snippet)
/** Whether a snippet talks to a cluster's nodes. */
const forCluster = (snippet: string) => snippet.includes('127.0.0.1:7001')

/** Whether a snippet connects as a user of a server started with `--users`. */
const asUser = (snippet: string) => snippet.includes("user: 'alice'")

/** The snippet with the addresses of the servers it runs against put in. */
function withAddresses(snippet: string): string {
	if (forCluster(snippet)) return snippet.replace(/127\.0\.0\.1:700(\d)/g, (_, n: string) => cluster.nodes[Number(n) - 1]!.addr)
	const target = speaksTls(snippet) ? shared.server : asUser(snippet) ? usersServer : shared.plain
	return snippet.replaceAll('127.0.0.1:7380', target.address)
}

function snippets(): string[] {
	const readme = fs.readFileSync(path.join(PACKAGE, 'README.md'), 'utf8')
	return [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map(m => m[1]!)
}

function expectedLines(snippet: string): string[] {
	return [...snippet.matchAll(/\/\/ prints: (.*)$/gm)].map(m => m[1]!)
}

test('every TypeScript snippet of the README compiles and runs as written', async () => {
	const all = snippets()
	assert.ok(all.length >= 3, `${all.length} snippets found`)
	assert.ok(all.some(speaksTls), 'a snippet speaks TLS')
	assert.ok(all.some(forCluster), 'a snippet talks to a cluster')
	assert.ok(all.some(asUser), 'a snippet connects as a user')
	fs.rmSync(DIR, { recursive: true, force: true })
	fs.mkdirSync(DIR, { recursive: true })
	fs.copyFileSync(shared.ca.cert, path.join(DIR, 'ca.pem'))
	const files = all.map((snippet, i) => {
		const file = path.join(DIR, `snippet${i + 1}.ts`)
		fs.writeFileSync(file, withAddresses(snippet))
		return file
	})
	const tsc = path.join(PACKAGE, 'node_modules/typescript/bin/tsc')
	const flags = ['--module', 'nodenext', '--target', 'es2022', '--lib', 'es2022', '--types', 'node', '--strict', '--skipLibCheck', '--rootDir', DIR, '--outDir', path.join(DIR, 'out')]
	await run(process.execPath, [tsc, ...flags, ...files], { cwd: PACKAGE }).catch(e => assert.fail(`tsc: ${e.stdout}${e.stderr}`))
	for (const [i, snippet] of all.entries()) {
		const js = path.join(DIR, 'out', `snippet${i + 1}.js`)
		const { stdout, stderr } = await run(process.execPath, [js], { cwd: DIR, timeout: 30_000 }).catch(e => assert.fail(`snippet ${i + 1}: ${e.message}`))
		assert.equal(stderr, '', `snippet ${i + 1} wrote to stderr`)
		const lines = stdout.trimEnd().split('\n')
		const wanted = expectedLines(snippet)
		assert.ok(wanted.length > 0, `snippet ${i + 1} says what it prints`)
		assert.equal(lines.length, wanted.length, `snippet ${i + 1} printed ${JSON.stringify(lines)}`)
		wanted.forEach((want, j) => {
			const line = lines[j]!
			if (want.endsWith('…')) assert.ok(line.startsWith(want.slice(0, -1)), `snippet ${i + 1}: ${JSON.stringify(line)} does not start like ${JSON.stringify(want)}`)
			else assert.equal(line, want, `snippet ${i + 1}, line ${j + 1}`)
		})
	}
})
