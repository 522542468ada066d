/**
 * Connecting as a user (`holdline serve --users`): the user in the address
 * and as the `user` option, the `HELLO 3 AUTH USER TOKEN` said, bad names
 * refused with the shared texts, and `NOPERM` (a lock the user may not
 * name) as kind `invalid` with the server's line and `code: 'NOPERM'`;
 * against a scripted node, then a real server.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type ConnectOptions, type Store } from '../src/index.js'
import { resolveAuth, parseAddress } from '../src/address.js'
import { fromServer, showKey } from '../src/errors.js'
import { closedAfterEach, fakeNode, type FakeNode } from './fakenode.js'
import { startServerWithFile } from './server.js'
import { isText } from './texts.js'

const NOPERM = 'NOPERM user team-b may not use lock "payments"'

const closeAfterTest = closedAfterEach()

/** A scripted node whose user may not name the lock `payments`. */
async function guarded(): Promise<FakeNode> {
	return closeAfterTest(await fakeNode(args => (args[1] === 'payments' && args[0] !== 'HELLO' ? `-${NOPERM}\r\n` : undefined)))
}

async function store(address: string, options: ConnectOptions = {}): Promise<Store> {
	return closeAfterTest(await connect(address, options))
}

test("the user and token options win over the address's, each on its own", () => {
	const auth = (address: string, user?: string, token?: string) => resolveAuth(parseAddress(address), user, token)
	const url = 'redis://alice:from-url@h'
	assert.deepEqual(auth(url), { user: 'alice', token: 'from-url' })
	assert.deepEqual(auth(url, 'bob'), { user: 'bob', token: 'from-url' })
	assert.deepEqual(auth(url, undefined, 'given'), { user: 'alice', token: 'given' })
	assert.deepEqual(auth(url, 'bob', 'given'), { user: 'bob', token: 'given' })
	assert.deepEqual(auth('redis://:t@h', 'bob'), { user: 'bob', token: 't' })
	assert.deepEqual(auth('h:1', 'bob', 't'), { user: 'bob', token: 't' })
	assert.deepEqual(auth('h:1', undefined, 't'), { user: 'default', token: 't' })
	assert.equal(auth('h:1'), undefined)
})

test('a bad user option fails invalid naming it; a user needs a token', async () => {
	for (const bad of ['', 'al ice', 'a/b', 'é', 'u'.repeat(65), 7 as never]) {
		await assert.rejects(connect('h:1', { user: bad, token: 't' }), isText('invalid', 'bad_user', { user: showKey(String(bad)) }), String(bad))
	}
	await assert.rejects(connect('redis://h:1', { user: 'alice' }), isText('invalid', 'user_without_token', { user: '"alice"' }))
	for (const bad of ['redis://alice@h', 'redis://alice:@h', 'redis://al%20ice:t@h']) {
		await assert.rejects(connect(bad), isText('invalid', 'bad_address', { address: showKey(bad) }), bad)
	}
})

test('HELLO says the user and the token, on every connection', async () => {
	const node = await guarded()
	const at = node.address
	const cases: Array<[string, ConnectOptions, string[]]> = [
		[`redis://alice:tok@${at}`, {}, ['HELLO', '3', 'AUTH', 'alice', 'tok']],
		[`redis://:tok@${at}`, {}, ['HELLO', '3', 'AUTH', 'default', 'tok']],
		[`redis://default:tok@${at}`, {}, ['HELLO', '3', 'AUTH', 'default', 'tok']],
		[at, { token: 'tok' }, ['HELLO', '3', 'AUTH', 'default', 'tok']],
		[at, { user: 'bob', token: 't2' }, ['HELLO', '3', 'AUTH', 'bob', 't2']],
		[`redis://alice:tok@${at}`, { user: 'bob' }, ['HELLO', '3', 'AUTH', 'bob', 'tok']],
		[`redis://alice:tok@${at}`, { token: 't2' }, ['HELLO', '3', 'AUTH', 'alice', 't2']],
		[`redis://:tok@${at}`, { user: 'team-b.ops:1@x' }, ['HELLO', '3', 'AUTH', 'team-b.ops:1@x', 'tok']],
		[at, {}, ['HELLO', '3']],
	]
	for (const [address, options, hello] of cases) {
		node.seen.length = 0
		const s = await store(address, options)
		const lock = s.lock('team-a.jobs')
		// Two holds at once: two connections.
		await lock.hold('k', () => lock.hold('k2', () => undefined))
		const hellos = node.seen.filter(c => c[0] === 'HELLO')
		assert.ok(hellos.length >= 2, `${address}: ${JSON.stringify(hellos)}`)
		for (const said of hellos) assert.deepEqual(said, hello, address)
	}
})

test("NOPERM from any command: kind invalid, the server's text, code NOPERM", async () => {
	const node = await guarded()
	const s = await store(`redis://team-b:tok@${node.address}`)
	const payments = s.lock('payments')
	const noperm = (e: unknown) => {
		assert.ok(e instanceof HoldlineError, String(e))
		assert.equal(e.kind, 'invalid')
		assert.equal(e.message, NOPERM)
		assert.equal(e.code, 'NOPERM')
		return true
	}
	await assert.rejects(
		payments.hold('k', () => undefined),
		noperm,
	)
	await assert.rejects(
		payments.tryHold('k', () => undefined),
		noperm,
	)
	await assert.rejects(payments.inspect('k'), noperm)
	await assert.rejects(s.stats('payments'), noperm)
	await assert.rejects(s.put('payments', 'k', 5n, 'row', 'v'), noperm)
	// The connection is fine: a lock the user may use is granted.
	assert.equal(await s.lock('team-a.jobs').hold('k', () => 'held'), 'held')
	// Other refusals have no code.
	assert.equal(fromServer('ERR', "unknown command 'NOPE'").code, undefined)
	assert.equal(fromServer('NOPERMS', 'x').code, undefined)
	assert.equal(new HoldlineError('invalid', 'x').code, undefined)
})

test('a real server with users: each user may name only its own locks', async () => {
	const own = await startServerWithFile('--users', 'alice alice-token-0123456789 locks=team-a.*\nroot root-token-0123456789 admin\n')
	try {
		const alice = await store(`redis://alice:alice-token-0123456789@${own.address}`)
		assert.ok((await alice.lock('team-a.jobs').hold('k', lease => lease.fence)) > 0n)
		await assert.rejects(
			alice.lock('payments').hold('k', () => undefined),
			(e: unknown) => {
				assert.ok(e instanceof HoldlineError)
				assert.equal(e.kind, 'invalid')
				assert.equal(e.message, 'NOPERM user alice may not use lock "payments"')
				assert.equal(e.code, 'NOPERM')
				return true
			},
		)
		// The options, and an admin, who may use any lock.
		const root = await store(own.address, { user: 'root', token: 'root-token-0123456789' })
		assert.ok((await root.lock('payments').hold('k', lease => lease.fence)) > 0n)
		for (const url of [`redis://alice:wrong-token-0123456789@${own.address}`, `redis://mallory:alice-token-0123456789@${own.address}`]) {
			await assert.rejects(connect(url), isText('invalid', 'token_refused'), url)
		}
	} finally {
		await own.stop()
	}
})
