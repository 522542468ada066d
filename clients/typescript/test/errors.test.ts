/** Every error kind with its exact text, maxHold revocation, closing, and tokens. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as net from 'node:net'
import { execFileSync } from 'node:child_process'
import { connect, HoldlineError, type ErrorKind, type Store } from '../src/index.js'
import { holdOpen, refusedAddress, sharedServer, silentServer, startServer, startServerWithFile, until, whenLost } from './server.js'
import { isTableText, isText } from './texts.js'

const shared = sharedServer()

/** Asserts that `p` rejects (or `f` throws) a HoldlineError of `kind` with exactly `message`. */
function isError(kind: ErrorKind, message: string) {
	return (e: unknown) => {
		assert.ok(e instanceof HoldlineError, `a HoldlineError, not ${String(e)}`)
		assert.ok(e instanceof Error)
		assert.equal(e.message, message)
		assert.equal(e.kind, kind)
		return true
	}
}

test("in use: the core's text, after a wait and with a zero wait", async () => {
	const invoices = shared.store.lock('invoices')
	const letGo = await holdOpen(shared.store.lock('invoices'), '9')
	try {
		let ran = false
		const started = Date.now()
		await assert.rejects(
			invoices.hold('9', () => (ran = true), { wait: '200ms' }),
			isError('in use', `lock invoices: key "9": held past the hold's wait: in use`),
		)
		assert.ok(Date.now() - started >= 150, 'waited for its wait')
		await assert.rejects(
			invoices.hold('9', () => (ran = true), { wait: 0 }),
			isError('in use', `lock invoices: key "9": held past the hold's wait: in use`),
		)
		assert.equal(ran, false)
		assert.equal((await shared.store.stats('invoices')).timeouts, 2)
	} finally {
		await letGo()
	}
})

test('lost: maxHold revokes, the signal aborts, the next in line gets the key, hold rejects', async () => {
	// A ttl of 60 s renews every 20 s: a signal aborted well before that was pushed, not polled.
	const invoices = shared.store.lock('invoices', { ttl: '60s', maxHold: '300ms' })
	const text = 'lock invoices: key "m": the lease was lost: it was revoked at its maxHold'
	const started = Date.now()
	let abortedAfter = Infinity
	let reason: unknown
	let nextGotIt = false
	const next = shared.store.lock('invoices').hold('m', () => (nextGotIt = true), { wait: '30s' })
	const held = invoices.hold('m', async lease => {
		await whenLost(lease)
		abortedAfter = Date.now() - started
		reason = lease.signal.reason
		assert.equal(lease.lost, true)
		assert.throws(() => lease.check(), isError('lost', text))
		// The key went on at once, while this function still runs.
		await next
		assert.equal(nextGotIt, true)
		return 'dropped'
	})
	await assert.rejects(held, isError('lost', text))
	assert.ok(reason instanceof HoldlineError && reason.kind === 'lost' && reason.message === text)
	assert.ok(abortedAfter >= 250 && abortedAfter < 15_000, `aborted after ${abortedAfter}ms: at the maxHold, by the push`)
	assert.equal((await shared.store.stats('invoices')).revocations, 1)
})

test('lost: a rejection of the function still propagates unchanged', async () => {
	const invoices = shared.store.lock('invoices', { maxHold: '100ms' })
	const mine = new Error('mine')
	await assert.rejects(
		invoices.hold('m2', async lease => {
			await whenLost(lease)
			throw mine
		}),
		e => e === mine,
	)
})

test('invalid: names, keys, durations, a hold inside a hold of the same key', async () => {
	assert.throws(() => shared.store.lock('a b'), isError('invalid', 'lock "a b": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid'))
	assert.throws(() => shared.store.lock(''), isError('invalid', 'lock "": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid'))
	assert.throws(() => shared.store.lock('n'.repeat(129)), /a lock name is 1 to 128/)
	assert.throws(() => shared.store.lock('invoices', { ttl: 0 }), isError('invalid', 'lock invoices: a ttl is at least 1ms: invalid'))
	assert.throws(() => shared.store.lock('invoices', { maxHold: '0s' }), isError('invalid', 'lock invoices: a maxHold is at least 1ms: invalid'))
	assert.throws(
		() => shared.store.lock('invoices', { ttl: '10x' }),
		isError('invalid', `lock invoices: a ttl is a duration such as '10s', '2m' or '500ms', or a number of milliseconds, not "10x": invalid`),
	)
	const invoices = shared.store.lock('invoices')
	const refused: [() => Promise<unknown>, string][] = [
		[() => invoices.hold('7', () => 1, { wait: 'soon' }), `lock invoices: key "7": a wait is a duration such as '10s', '2m' or '500ms', or a number of milliseconds, not "soon": invalid`],
		[() => invoices.hold('', () => 1), 'lock invoices: key "": the key is empty: invalid'],
		[() => invoices.tryHold('a\nb', () => 1), 'lock invoices: key "a\\nb": the key holds a control character: invalid'],
		[() => invoices.hold(1.5, () => 1), 'lock invoices: a key is text or a whole number, not 1.5: invalid'],
		[() => invoices.hold('7', 'work' as never), 'lock invoices: key "7": the holder is a function, not string: invalid'],
	]
	for (const [attempt, text] of refused) await assert.rejects(attempt(), isError('invalid', text))
	await invoices.hold('7', async () => {
		await assert.rejects(
			invoices.hold('7', () => 1),
			isError('invalid', 'lock invoices: key "7": hold inside a hold of the same key: invalid'),
		)
		// Through another handle on the same name, and from a task started inside.
		await assert.rejects(
			shared.store.lock('invoices').hold(7, () => 1),
			isError('invalid', 'lock invoices: key "7": hold inside a hold of the same key: invalid'),
		)
		const fromTask = new Promise((resolve, reject) => setTimeout(() => invoices.hold('7', () => 1).then(resolve, reject), 1))
		await assert.rejects(fromTask, (e: unknown) => e instanceof HoldlineError && e.kind === 'invalid')
		// tryHold of a key this context holds answers not acquired; other keys are fine.
		assert.deepEqual(await invoices.tryHold('7', () => 1), { acquired: false })
		assert.equal(await invoices.hold('8', () => 'other key'), 'other key')
	})
	// Once the outer hold is over, the same key is fine again.
	assert.equal(await invoices.hold('7', () => 'again'), 'again')
})

test('limit: 10000 waiters already stand in line', async t => {
	const fdLimit = Number(execFileSync('sh', ['-c', 'ulimit -n']).toString().trim())
	if (!(fdLimit >= 10_100)) {
		t.skip(`needs 10,100 file descriptors, ulimit -n is ${fdLimit}`)
		return
	}
	const big = await startServer(['--max-connections', '10100'])
	const bigStore = await connect(big.address)
	const sockets: net.Socket[] = []
	try {
		const letGo = await holdOpen(bigStore.lock('lim'), 'k')
		const [host, port] = big.address.split(':') as [string, string]
		const hold = Buffer.from('*5\r\n$4\r\nHOLD\r\n$3\r\nlim\r\n$1\r\nk\r\n$4\r\nWAIT\r\n$6\r\n600000\r\n')
		// Raw connections, each standing in line with one HOLD.
		for (let i = 0; i < 10_000; i += 500) {
			await Promise.all(
				Array.from(
					{ length: 500 },
					() =>
						new Promise<void>((resolve, reject) => {
							const s = net.connect(Number(port), host, () => {
								s.write(hold)
								resolve()
							})
							s.on('error', reject)
							sockets.push(s)
						}),
				),
			)
		}
		await until('10000 waiters', async () => (await bigStore.stats('lim')).waiters === 10_000, 60_000)
		await assert.rejects(
			bigStore.lock('lim').hold('k', () => 1),
			isError('limit', 'lock lim: key "k": 10000 waiters already stand in line: limit'),
		)
		for (const s of sockets) s.destroy()
		await until('the line empties', async () => (await bigStore.stats('lim')).waiters === 0, 60_000)
		await letGo()
	} finally {
		for (const s of sockets) s.destroy()
		await bigStore.close()
		await big.stop()
	}
})

test('closed: after store.close every call fails closed, waiters fail closed, holders are lost', async () => {
	const s = await connect(shared.server.address)
	const lock = s.lock('invoices')
	const letGo = await holdOpen(shared.store.lock('invoices'), 'c')
	const waiting = lock.hold('c', () => 1, { wait: '30s' })
	await until('one waiter', async () => (await shared.store.stats('invoices')).waiters === 1)
	let reason: unknown
	const holding = lock.hold('d', async lease => {
		await whenLost(lease)
		reason = lease.signal.reason
	})
	holding.catch(() => {})
	waiting.catch(() => {})
	await until('d held', async () => (await shared.store.stats('invoices')).held_keys === 2)
	await s.close()
	await s.close()
	await assert.rejects(waiting, isError('closed', 'lock invoices: key "c": the store is closed: closed'))
	await assert.rejects(holding, isError('lost', 'lock invoices: key "d": the lease was lost: its store closed'))
	assert.ok(reason instanceof HoldlineError && reason.message === 'lock invoices: key "d": the lease was lost: its store closed')
	for (const attempt of [() => lock.hold('7', () => 1), () => lock.tryHold('7', () => 1)]) {
		await assert.rejects(attempt(), isError('closed', 'lock invoices: key "7": the store is closed: closed'))
	}
	assert.throws(() => s.lock('invoices'), isError('closed', 'lock invoices: the store is closed: closed'))
	// The server let the closed store's key go and took its waiter out of the line.
	await until('d let go', async () => (await shared.store.stats('invoices')).held_keys === 1)
	assert.equal((await shared.store.stats('invoices')).waiters, 0)
	await letGo()
})

/**
 * A server of its own and, through one store, a holder of `key` that waits
 * for its loss (`seen.reason`, the signal's reason) and a waiter in line
 * behind it, for a test that stops the server.
 */
async function holderAndWaiter(lockName: string, key: string) {
	const own = await startServer()
	const s = await connect(own.address)
	const lock = s.lock(lockName)
	const seen: { reason?: unknown } = {}
	const holding = lock.hold(key, async lease => {
		await whenLost(lease)
		seen.reason = lease.signal.reason
	})
	const waiting = lock.hold(key, () => 1, { wait: '30s' })
	// Both settle while the server stops, before the test's asserts look at them.
	holding.catch(() => {})
	waiting.catch(() => {})
	await until('one waiter', async () => (await s.stats(lockName)).waiters === 1)
	return { own, s, lock, seen, holding, waiting }
}

test('closed: the server shutting down fails waiters closed and loses holders', async () => {
	const { own, s, lock, seen, holding, waiting } = await holderAndWaiter('invoices', '7')
	assert.equal(await own.stop('SIGTERM'), 0)
	// The server closes its store before its connections: waiters hear CLOSED, holders the push.
	await assert.rejects(waiting, isError('closed', 'lock invoices: key "7": the store is closed: closed'))
	await assert.rejects(holding, isError('lost', 'lock invoices: key "7": the lease was lost: its store closed'))
	assert.ok(seen.reason instanceof HoldlineError && seen.reason.kind === 'lost')
	// A later hold fails closed: it cannot connect, or (when it took an idle
	// pooled connection whose close the event loop has not delivered yet)
	// that connection closes under it.
	await assert.rejects(
		lock.hold('8', () => 1),
		(e: unknown) => {
			assert.ok(e instanceof HoldlineError && e.kind === 'closed', String(e))
			const texts = [isTableText(e.message, 'cannot_connect', { hostport: own.address }), isTableText(e.message, 'connection_closed_key', { lock: 'invoices', key: '"8"' })]
			assert.ok(texts.includes(true), e.message)
			return true
		},
	)
	await s.close()
})

test('the connection dropping: holders lost, waiters closed', async () => {
	const { own, s, seen, holding, waiting } = await holderAndWaiter('dropped', 'k')
	// SIGKILL: no CLOSED, no push; only the connections drop.
	await own.stop('SIGKILL')
	await assert.rejects(holding, isText('lost', 'lost_connection', { lock: 'dropped', key: '"k"' }))
	assert.equal(seen.reason, await holding.catch(e => e))
	await assert.rejects(waiting, isText('closed', 'connection_closed_key', { lock: 'dropped', key: '"k"' }))
	await s.close()
})

test('closed: nothing listening', async () => {
	await using dead = await refusedAddress()
	await assert.rejects(connect(dead.address), isText('closed', 'cannot_connect', { hostport: dead.address }))
	await assert.rejects(connect(`redis://localhost:${dead.port}`), isText('closed', 'cannot_connect', { hostport: `localhost:${dead.port}` }))
})

test('closed: a server that accepts and answers nothing fails connect after the connect timeout', async () => {
	await using silent = await silentServer()
	const started = Date.now()
	await assert.rejects(connect(silent.address, { connectTimeout: '300ms' }), isText('closed', 'connect_silent', { hostport: silent.address, timeout: '300ms' }))
	assert.ok(Date.now() - started >= 250, 'not before its timeout')
})

test('closed: a server at its connection limit refuses the connection at connect', async () => {
	const own = await startServer(['--max-connections', '1'])
	let first: Store | undefined
	try {
		// The server may still count the connection that saw it listening.
		await until('a first store connects', async () => {
			first = await connect(own.address).catch(() => undefined)
			return first !== undefined
		})
		await assert.rejects(connect(own.address), (e: unknown) => {
			isText('closed', 'connect_refused', { hostport: own.address })(e)
			assert.match((e as Error).message, /\(ERR max number of clients reached\): closed$/)
			return true
		})
	} finally {
		await first?.close()
		await own.stop()
	}
})

test('invalid: a bad address fails at once, naming it', async () => {
	for (const address of ['http://127.0.0.1:7380', 'localhost:http', 'redis://user@localhost', 'rediss://user@localhost', 'redis://us er:pw@localhost']) {
		await assert.rejects(connect(address), isText('invalid', 'bad_address', { address: JSON.stringify(address) }))
	}
})

test('a token: missing or wrong fails at connect, right works, in the URL too', async () => {
	const own = await startServerWithFile('--token-file', 's3cret\n')
	try {
		await assert.rejects(connect(own.address), isText('invalid', 'token_missing'))
		await assert.rejects(connect(own.address, { token: 'wrong' }), isText('invalid', 'token_refused'))
		await assert.rejects(connect(`redis://:wrong@${own.address}`), isText('invalid', 'token_refused'))
		// The option wins over the URL's token.
		await assert.rejects(connect(`redis://:s3cret@${own.address}`, { token: 'wrong' }), isText('invalid', 'token_refused'))
		for (const s of [await connect(own.address, { token: 's3cret' }), await connect(`redis://:s3cret@${own.address}`), await connect(`redis://:wrong@${own.address}`, { token: 's3cret' })]) {
			assert.equal(await s.lock('t').hold('k', () => 'in'), 'in')
			await s.close()
		}
	} finally {
		await own.stop()
	}
})
