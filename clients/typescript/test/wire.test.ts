/** The client against a scripted server, for orderings a real server makes only by chance. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as net from 'node:net'
import { once } from 'node:events'
import { connect, HoldlineError } from '../src/index.js'
import { HELLO } from './fakenode.js'
import { until, whenLost } from './server.js'
import { isText } from './texts.js'

const LOST = 'lock s: key "k": the lease was lost: it was revoked at its maxHold'

/**
 * A server that answers each command by its name, with `answers[name]`
 * (`null`: it closes the connection instead), after `delays[name]` ms, in
 * order (as the real one does); `seen` lists the names read, when read.
 */
async function scripted(answers: Record<string, string | null>, delays: Record<string, number> = {}) {
	const seen: string[] = []
	const sockets = new Set<net.Socket>()
	const timers = new Set<NodeJS.Timeout>()
	const server = net.createServer(socket => {
		sockets.add(socket)
		socket.on('close', () => sockets.delete(socket))
		let answered = Promise.resolve()
		socket.on('data', chunk => {
			// Each command is one array of bulk strings; its name is the first.
			for (const match of chunk.toString().matchAll(/\*\d+\r\n\$\d+\r\n([A-Z]+)\r\n/g)) {
				const name = match[1]!
				seen.push(name)
				const delay = delays[name]
				// Back to back, as the real server answers what queued behind a waiting HOLD.
				answered = answered
					.then(() => (delay === undefined ? undefined : new Promise(r => timers.add(setTimeout(r, delay)))))
					.then(() => {
						const answer = answers[name]
						if (answer === null) socket.destroy()
						else socket.write(answer ?? `-ERR unknown command '${name}'\r\n`)
					})
			}
		})
		socket.on('error', () => {})
	})
	server.listen(0, '127.0.0.1')
	await once(server, 'listening')
	const { port } = server.address() as net.AddressInfo
	const close = () => {
		for (const t of timers) clearTimeout(t)
		for (const s of sockets) s.destroy()
		server.close()
	}
	return { address: `127.0.0.1:${port}`, seen, close, openConnections: () => [...sockets].filter(s => !s.destroyed && s.readable).length }
}

test('a loss pushed in the same read as its grant aborts the signal before the function runs', async () => {
	const server = await scripted({
		HELLO,
		PING: '+PONG\r\n',
		// The grant, then its loss, in one write.
		HOLD: `*2\r\n:5\r\n:99\r\n>3\r\n+lost\r\n:5\r\n$${Buffer.byteLength(LOST)}\r\n${LOST}\r\n`,
		RELEASE: `-LOST ${LOST}\r\n`,
	})
	const store = await connect(server.address)
	try {
		let atStart: unknown
		const held = store.lock('s').hold('k', lease => {
			atStart = lease.signal.reason
			assert.equal(lease.fence, 99n)
			return 'value'
		})
		await assert.rejects(held, (e: unknown) => e instanceof HoldlineError && e.kind === 'lost' && e.message === LOST)
		assert.ok(atStart instanceof HoldlineError && atStart.message === LOST)
		// CLUSTER SLOTS at connect, answered with an error: a single node.
		assert.deepEqual(server.seen, ['HELLO', 'CLUSTER', 'HOLD', 'RELEASE'])
	} finally {
		await store.close()
		server.close()
	}
})

test('a RENEW answered LOST aborts the signal (a server that does not push)', async () => {
	const server = await scripted({
		HELLO,
		PING: '+PONG\r\n',
		TRYHOLD: '*2\r\n:1\r\n:7\r\n',
		RENEW: `-LOST ${LOST}\r\n`,
		RELEASE: `-LOST ${LOST}\r\n`,
	})
	const store = await connect(server.address)
	try {
		const tried = store.lock('s', { ttl: '600ms' }).tryHold('k', async lease => {
			await whenLost(lease)
			return (lease.signal.reason as HoldlineError).message
		})
		await assert.rejects(tried, (e: unknown) => e instanceof HoldlineError && e.kind === 'lost' && e.message === LOST)
		assert.ok(server.seen.includes('RENEW'))
	} finally {
		await store.close()
		server.close()
	}
})

test('an answer that is no RESP closes the connection and fails what waited on it', async () => {
	const server = await scripted({ HELLO, PING: '+PONG\r\n', HOLD: '?\r\n' })
	const store = await connect(server.address)
	try {
		await assert.rejects(
			store.lock('s').hold('k', () => 1),
			isText('closed', 'connection_closed_key', { lock: 's', key: '"k"' }),
		)
	} finally {
		await store.close()
		server.close()
	}
})

test('a hold keeps its connection talking while it waits in line', async () => {
	const server = await scripted({ HELLO, PING: '+PONG\r\n', HOLD: '*2\r\n:3\r\n:30\r\n', RENEW: '+OK\r\n', RELEASE: '+OK\r\n' }, { HOLD: 1000 })
	const store = await connect(server.address)
	try {
		// A ttl of 300 ms renews every 100 ms: a one-second wait sends many PINGs.
		// The grant answers a HOLD sent a second ago, far more than a ttl: a
		// RENEW answered OK confirms it before the function runs.
		const fence = await store.lock('s', { ttl: '300ms' }).hold('k', lease => {
			assert.equal(lease.lost, false)
			return lease.fence
		})
		assert.equal(fence, 30n)
		const pingsWhileWaiting = server.seen.slice(server.seen.indexOf('HOLD'), server.seen.indexOf('RENEW')).filter(n => n === 'PING')
		assert.ok(pingsWhileWaiting.length >= 5, `${pingsWhileWaiting.length} PINGs while waiting`)
		assert.ok(server.seen.includes('RENEW'), `seen ${server.seen}`)
	} finally {
		await store.close()
		server.close()
	}
})

test('a store command whose connection closes fails with the connection_closed text', async () => {
	const server = await scripted({ HELLO, GET: null })
	const store = await connect(server.address)
	try {
		await assert.rejects(store.get('row'), isText('closed', 'connection_closed'))
	} finally {
		await store.close()
		server.close()
	}
})

test('a store command answered nothing for the connect timeout fails with the connect_silent text', async () => {
	const server = await scripted({ HELLO, STATS: '%0\r\n' }, { STATS: 60_000 })
	const store = await connect(server.address, { connectTimeout: '300ms' })
	try {
		const started = Date.now()
		await assert.rejects(store.stats('s'), isText('closed', 'connect_silent', { hostport: server.address, timeout: '300ms' }))
		assert.ok(Date.now() - started >= 250, 'not before its timeout')
	} finally {
		await store.close()
		server.close()
	}
})

test('a lease whose connection stops answering is lost by the clock, and that connection closed', async () => {
	// RENEW is never answered: after the grant, nothing more comes back.
	const server = await scripted({ HELLO, HOLD: '*2\r\n:4\r\n:40\r\n' }, { RENEW: 600_000 })
	const store = await connect(server.address)
	try {
		const started = performance.now()
		let lostAfter = 0
		const held = store.lock('s', { ttl: '300ms' }).hold('k', async lease => {
			await whenLost(lease)
			lostAfter = performance.now() - started
			assert.equal(lease.lost, true)
			assert.throws(() => lease.check(), isText('lost', 'lost_silent', { lock: 's', key: '"k"', ttl: '300ms' }))
		})
		await assert.rejects(held, isText('lost', 'lost_silent', { lock: 's', key: '"k"', ttl: '300ms' }))
		// The HOLD was sent after `started`: lost no sooner than its send plus the ttl less the margin (30 ms).
		assert.ok(lostAfter >= 270, `lost after ${lostAfter}ms`)
		// The client closed that connection rather than send RELEASE on it.
		await until('the connection closed', () => server.openConnections() === 0)
		assert.ok(!server.seen.includes('RELEASE'), `seen ${server.seen}`)
	} finally {
		await store.close()
		server.close()
	}
})

test('a grant that comes after its first deadline is confirmed by a RENEW; LOST or no answer fails the hold, the function not run', async () => {
	const LATE_LOST = 'lock s: key "k": the lease was lost: it ran out (ttl 300ms)'
	const cases: Array<[string, Record<string, string>, Record<string, number>, (e: unknown) => boolean]> = [
		['LOST', { RENEW: `-LOST ${LATE_LOST}\r\n` }, {}, e => e instanceof HoldlineError && e.kind === 'lost' && e.message === LATE_LOST],
		['silent', { RENEW: '+OK\r\n' }, { RENEW: 600_000 }, isText('lost', 'lost_silent', { lock: 's', key: '"k"', ttl: '300ms' })],
	]
	for (const [what, answers, delays, check] of cases) {
		const server = await scripted({ HELLO, PING: '+PONG\r\n', HOLD: '*2\r\n:3\r\n:30\r\n', RELEASE: '-INVALID x\r\n', ...answers }, { HOLD: 500, ...delays })
		const store = await connect(server.address)
		try {
			let ran = false
			const started = performance.now()
			await assert.rejects(
				store.lock('s', { ttl: '300ms' }).hold('k', () => (ran = true)),
				check,
				what,
			)
			assert.equal(ran, false, what)
			assert.ok(server.seen.includes('RENEW'), what)
			// No answer: given up after the ttl, at least 1 s, past the grant.
			if (what === 'silent') assert.ok(performance.now() - started >= 500 + 1000 - 50, what)
		} finally {
			await store.close()
			server.close()
		}
	}
})
