/**
 * TLS: a real `holdline serve --tls-cert ... --tls-key ...` (and
 * `--tls-client-ca ...`) with certificates made for the test (`certs.ts`).
 * Holds over TLS, `rediss://` addresses, a client that trusts another CA,
 * a server that wants client certificates, plain text meeting TLS either
 * way, and the lease's clock behind a frozen link, unchanged by TLS.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as fs from 'node:fs'
import { connect, HoldlineError } from '../src/index.js'
import { Ca, sharedTlsServers, tlsFlags } from './certs.js'
import { INDEX_URL, runProgram } from './child.js'
import { lostBeforeTheKeyMovesOn, startProxy } from './proxy.js'
import { silentServer, startServer, startServerWithFile } from './server.js'
import { isText } from './texts.js'

/** A TLS server with a leaf of `shared.ca`, and a plain one. */
const shared = sharedTlsServers()

/** A `tls_failed` for `hostport` whose reason matches `reason`. */
function tlsFailed(hostport: string, reason: RegExp) {
	return (e: unknown) => {
		isText('closed', 'tls_failed', { hostport })(e)
		const said = /\((.*)\): closed$/s.exec((e as Error).message)?.[1] ?? ''
		assert.match(said, reason)
		return true
	}
}

/** Holds `key` of lock `tls` once through a store at `address`; answers the fence, and what `inspect` saw while held. */
async function holdOnce(address: string, options: Parameters<typeof connect>[1]) {
	await using store = await connect(address, options)
	const lock = store.lock('tls')
	return await lock.hold('k', async lease => ({ fence: lease.fence, state: await lock.inspect('k'), lost: lease.lost }))
}

test('holds go over TLS given the tls option, with any address form, or a rediss:// URL', async () => {
	const trusted = shared.ca.trusting()
	const port = shared.server.address.split(':')[1]!
	let last = 0n
	for (const address of [shared.server.address, `localhost:${port}`, `rediss://127.0.0.1:${port}`, `rediss://localhost:${port}`]) {
		const { fence, state, lost } = await holdOnce(address, { tls: trusted })
		assert.ok(fence > last, `${address}: fence ${fence} after ${last}`)
		last = fence
		assert.equal(lost, false)
		assert.equal(state?.held, true)
		assert.equal(state?.fence, fence)
	}
	// A token in a rediss:// URL, as in a redis:// one.
	const guarded = await startServerWithFile('--token-file', 's3cret\n', tlsFlags(shared.ca))
	try {
		const guardedPort = guarded.address.split(':')[1]!
		assert.ok((await holdOnce(`rediss://:s3cret@127.0.0.1:${guardedPort}`, { tls: trusted })).fence >= 1n)
		await assert.rejects(connect(`rediss://127.0.0.1:${guardedPort}`, { tls: trusted }), isText('invalid', 'token_missing'))
	} finally {
		await guarded.stop()
	}
})

test('a client trusting another CA, or a name not in the certificate, fails at connect', async () => {
	const other = new Ca(shared.ca.folder, 'other')
	await assert.rejects(connect(shared.server.address, { tls: other.trusting() }), tlsFailed(shared.server.address, /unable to verify|self.signed/))
	// rediss:// without the tls option trusts Node's default CAs, which do not include the test's own.
	await assert.rejects(connect(`rediss://${shared.server.address}`), tlsFailed(shared.server.address, /unable to verify|self.signed/))
	// The certificate names 127.0.0.1 and localhost only.
	await assert.rejects(connect(shared.server.address, { tls: { ...shared.ca.trusting(), servername: 'example.com' } }), tlsFailed(shared.server.address, /example\.com/))
	// What failed stays reachable, as the cause.
	const error = await connect(shared.server.address, { tls: other.trusting() }).catch((e: unknown) => e)
	assert.ok(error instanceof HoldlineError && error.cause instanceof Error)
})

test('a server wanting client certificates serves a client with one and refuses one without, at connect', async () => {
	const strict = await startServer(tlsFlags(shared.ca, '--tls-client-ca', shared.ca.cert))
	try {
		assert.ok((await holdOnce(strict.address, { tls: shared.ca.trusting(true) })).fence >= 1n)
		// Under TLS 1.3 the refusal comes as an alert after the handshake, racing the HELLO.
		for (let i = 0; i < 5; i++) {
			await assert.rejects(connect(strict.address, { tls: shared.ca.trusting() }), tlsFailed(strict.address, /certificate required/))
		}
		// Under TLS 1.2 it comes in the handshake.
		await assert.rejects(connect(strict.address, { tls: { ...shared.ca.trusting(), maxVersion: 'TLSv1.2' } }), tlsFailed(strict.address, /./))
		// A certificate from another CA.
		const stranger = new Ca(shared.ca.folder, 'stranger').leaf(true)
		const foreign = { ...shared.ca.trusting(), cert: fs.readFileSync(stranger.cert), key: fs.readFileSync(stranger.key) }
		await assert.rejects(connect(strict.address, { tls: foreign }), tlsFailed(strict.address, /./))
	} finally {
		await strict.stop()
	}
})

test('plain text and TLS meeting fail at connect, saying so', async () => {
	await assert.rejects(connect(shared.server.address), tlsFailed(shared.server.address, /^the server speaks TLS/))
	await assert.rejects(connect(`redis://${shared.server.address}`), tlsFailed(shared.server.address, /^the server speaks TLS/))
	await assert.rejects(connect(shared.plain.address, { tls: shared.ca.trusting() }), tlsFailed(shared.plain.address, /./))
	await assert.rejects(connect(`rediss://${shared.plain.address}`), tlsFailed(shared.plain.address, /./))
})

test('a server that accepts and answers no TLS handshake fails connect after the connect timeout', async () => {
	await using silent = await silentServer()
	const started = Date.now()
	await assert.rejects(connect(`rediss://${silent.address}`, { connectTimeout: '300ms' }), isText('closed', 'connect_silent', { hostport: silent.address, timeout: '300ms' }))
	assert.ok(Date.now() - started >= 250, 'not before its timeout')
})

test('the tls option is an object of tls.connect options', async () => {
	for (const bad of [true, 'yes', null]) {
		await assert.rejects(connect(shared.server.address, { tls: bad as never }), (e: unknown) => e instanceof HoldlineError && e.kind === 'invalid')
	}
})

test('over TLS, a holder behind a frozen link is told of its loss before another client is granted the key', async () => {
	const trusted = shared.ca.trusting()
	const proxy = await startProxy(shared.server.address)
	try {
		await using behind = await connect(proxy.address, { tls: trusted })
		await using direct = await connect(shared.server.address, { tls: trusted })
		await lostBeforeTheKeyMovesOn(proxy, behind, direct, 'tls-frozen')
	} finally {
		await proxy.stop()
	}
})

test('a program that never closes its TLS store exits by itself once its work is done', async () => {
	const program = `
		import { connect } from ${JSON.stringify(INDEX_URL)}
		import * as fs from 'node:fs'
		const store = await connect(${JSON.stringify(`rediss://${shared.server.address}`)}, { tls: { ca: fs.readFileSync(${JSON.stringify(shared.ca.cert)}) } })
		console.log(await store.lock('exits').hold('k', lease => String(lease.lost)))
	`
	assert.equal(await runProgram(program), 'false\n')
})
