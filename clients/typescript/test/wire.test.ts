/** The client against a scripted server, for orderings a real server makes only by chance. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as net from 'node:net'
import { once } from 'node:events'
import { connect, HoldlineError } from '../src/index.js'

const LOST = 'lock s: key "k": the lease was lost: it was revoked at its maxHold'

/**
 * A server that answers each command by its name, with `answers[name]`,
 * after `delays[name]` ms, in order (as the real one does); `seen` lists the
 * names read, when read.
 */
async function scripted(answers: Record<string, string>, delays: Record<string, number> = {}) {
	const seen: string[] = []
	const server = net.createServer(socket => {
		let answered = Promise.resolve()
		socket.on('data', chunk => {
			// Each command is one array of bulk strings; its name is the first.
			for (const match of chunk.toString().matchAll(/\*\d+\r\n\$\d+\r\n([A-Z]+)\r\n/g)) {
				const name = match[1]!
				seen.push(name)
				answered = answered
					.then(() => new Promise(r => setTimeout(r, delays[name] ?? 0)))
					.then(() => void socket.write(answers[name] ?? `-ERR unknown command '${name}'\r\n`))
			}
		})
		socket.on('error', () => {})
	})
	server.listen(0, '127.0.0.1')
	await once(server, 'listening')
	const { port } = server.address() as net.AddressInfo
	return { address: `127.0.0.1:${port}`, seen, close: () => server.close() }
}

test('a loss pushed in the same read as its grant aborts the signal before the function runs', async () => {
	const server = await scripted({
		HELLO: '%1\r\n+server\r\n+scripted\r\n',
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
		assert.deepEqual(server.seen, ['HELLO', 'PING', 'HOLD', 'RELEASE'])
	} finally {
		await store.close()
		server.close()
	}
})

test('a RENEW answered LOST aborts the signal (a server that does not push)', async () => {
	const server = await scripted({
		HELLO: '%1\r\n+server\r\n+scripted\r\n',
		PING: '+PONG\r\n',
		TRYHOLD: '*2\r\n:1\r\n:7\r\n',
		RENEW: `-LOST ${LOST}\r\n`,
		RELEASE: `-LOST ${LOST}\r\n`,
	})
	const store = await connect(server.address)
	try {
		const tried = store.lock('s', { ttl: '60ms' }).tryHold('k', async lease => {
			await new Promise(resolve => lease.signal.addEventListener('abort', resolve))
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
	const server = await scripted({ HELLO: '%1\r\n+server\r\n+scripted\r\n', PING: '+PONG\r\n', HOLD: '?\r\n' })
	const store = await connect(server.address)
	try {
		await assert.rejects(
			store.lock('s').hold('k', () => 1),
			(e: unknown) => e instanceof HoldlineError && e.kind === 'closed' && e.message === 'lock s: key "k": the connection to the server closed: closed',
		)
	} finally {
		await store.close()
		server.close()
	}
})

test('a hold keeps its connection talking while it waits in line', async () => {
	const server = await scripted(
		{ HELLO: '%1\r\n+server\r\n+scripted\r\n', PING: '+PONG\r\n', HOLD: '*2\r\n:3\r\n:30\r\n', RELEASE: '+OK\r\n' },
		{ HOLD: 1000 },
	)
	const store = await connect(server.address)
	try {
		// A ttl of 90 ms renews every 30 ms: a one-second wait sends many PINGs.
		assert.equal(await store.lock('s', { ttl: '90ms' }).hold('k', lease => lease.fence), 30n)
		const pingsWhileWaiting = server.seen.slice(server.seen.indexOf('HOLD'), server.seen.indexOf('RELEASE')).filter(n => n === 'PING')
		assert.ok(pingsWhileWaiting.length >= 5, `${pingsWhileWaiting.length} PINGs while waiting`)
	} finally {
		await store.close()
		server.close()
	}
})
