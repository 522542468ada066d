/**
 * Servers that are not holdline: each fails `connect` at once with its own
 * text of `clients/texts.json`, never at the first hold. Each fake server
 * answers the client's `HELLO` as Redis, an HTTP server, a source of random
 * bytes or a server announcing a huge reply would; a silent server is
 * `errors.test.ts`'s (`connect_silent`).
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as net from 'node:net'
import { connect, type ConnectOptions } from '../src/index.js'
import { isText } from './texts.js'

/** What Redis 7.0.15 answers `HELLO 3`. */
const REDIS_HELLO3 =
	'%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n' +
	'$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n' +
	'$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n'

/** The same in RESP2's form: a flat array of fields and values. */
const REDIS_HELLO2 = `*14${REDIS_HELLO3.slice(2).replace(':3\r\n', ':2\r\n')}`

const HTTP_400 = 'HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n'

/** Fixed "random" bytes: no RESP type first, no line end, not all UTF-8. */
const RANDOM = Buffer.from([0x9f, 0x00, 0xff, 0x7a, 0x07, 0xc3, 0xa9, 0x51, 0x01, 0xfe, 0x80, 0x11, 0x22])

interface Impostor extends AsyncDisposable {
	address: string
}

/**
 * A server that answers its first read with `answer` (closes at once,
 * unread, when it is empty), then sends a byte every 10 ms while
 * `trickle`, and keeps the connection open until disposed of.
 */
async function impostor(answer: string | Buffer, trickle = false): Promise<Impostor> {
	const sockets = new Set<net.Socket>()
	const timers = new Set<NodeJS.Timeout>()
	const server = net.createServer(socket => {
		sockets.add(socket)
		socket.on('error', () => {})
		if (answer.length === 0) {
			socket.destroy()
			return
		}
		socket.once('data', () => {
			socket.write(answer)
			if (trickle) timers.add(setInterval(() => socket.write('a'), 10))
		})
	})
	await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
	const { port } = server.address() as net.AddressInfo
	return {
		address: `127.0.0.1:${port}`,
		async [Symbol.asyncDispose]() {
			for (const timer of timers) clearInterval(timer)
			for (const socket of sockets) socket.destroy()
			await new Promise(resolve => server.close(resolve))
		},
	}
}

/** Connects to `fake`, which must fail within 2 s: the rejection's check. */
async function connectFails(fake: Impostor, check: (e: unknown) => boolean, options: ConnectOptions = {}): Promise<void> {
	const started = Date.now()
	await assert.rejects(connect(fake.address, options), check)
	assert.ok(Date.now() - started < 2000, `${Date.now() - started}ms`)
}

test('Redis fails connect naming its server and version, in RESP3 and RESP2', async () => {
	for (const answer of [REDIS_HELLO3, REDIS_HELLO2]) {
		await using redis = await impostor(answer)
		await connectFails(redis, isText('invalid', 'not_holdline', { hostport: redis.address, server: 'redis 7.0.15' }))
	}
})

test('a HELLO answer that names no server fails connect unnamed', async () => {
	await using other = await impostor('%1\r\n$5\r\nproto\r\n:3\r\n')
	await connectFails(other, isText('invalid', 'not_holdline_unnamed', { hostport: other.address }))
})

test('an HTTP server fails connect: not RESP, quoting its first 10 bytes', async () => {
	await using http = await impostor(HTTP_400)
	await connectFails(http, isText('closed', 'not_resp', { hostport: http.address, bytes: '"HTTP/1.1 4"' }))
})

test('random bytes fail connect at once: not RESP', async () => {
	await using noise = await impostor(RANDOM, true)
	// The first 10 bytes, each that is not UTF-8 as U+FFFD, shown as a key.
	const bytes = '"\ufffd\\0\ufffdz\\u{7}éQ\\u{1}\ufffd"'
	await connectFails(noise, isText('closed', 'not_resp', { hostport: noise.address, bytes }))
})

test('a huge announced reply fails connect at once, unread, memory bounded', async () => {
	await using huge = await impostor('$999999999999\r\n', true)
	const before = process.memoryUsage().rss
	await connectFails(huge, isText('closed', 'reply_too_large', { hostport: huge.address, size: '999999999999', limit: '67108864' }))
	const grew = process.memoryUsage().rss - before
	assert.ok(grew < 8 << 20, `rss grew ${grew} bytes`)
})

test('maxReplyBytes sets the limit', async () => {
	await using big = await impostor('*2\r\n$2000\r\n', true)
	await connectFails(big, isText('closed', 'reply_too_large', { hostport: big.address, size: '2000', limit: '1024' }), { maxReplyBytes: 1024 })
	await assert.rejects(connect(big.address, { maxReplyBytes: 0 }), (e: unknown) => e instanceof Error && e.message === 'store: maxReplyBytes is a count of bytes, not 0: invalid')
})

test('a server that closes at once fails connect closed', async () => {
	await using rude = await impostor('')
	await connectFails(rude, isText('closed', 'connection_closed'))
})
