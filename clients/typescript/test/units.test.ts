/** Unit tests of the parts that need no server: RESP, durations, addresses, error texts. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Decoder, encodeCommand, MAX_REPLY_BYTES, RespError, RespNotResp, RespPush, RespTooLarge, type Reply } from '../src/resp.js'
import { now, toMillis, toPositiveMillis } from '../src/duration.js'
import { Lease } from '../src/lease.js'
import { errorFor, fromServer, showKey, HoldlineError } from '../src/errors.js'
import { DEFAULT_PORT, parseAddress, parseAddresses, showAddress } from '../src/address.js'
import { crc16, slotOf, SLOTS } from '../src/slots.js'
import { CLUSTER_DOWN_PAUSE_MS, CLUSTER_DOWN_TRIES, MAP_REFRESH_NODE_TIMEOUT_MS, MAX_REDIRECTS, movedTarget } from '../src/router.js'
import { lostMarginMs, showMs, waitGraceMs } from '../src/duration.js'
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../src/store.js'
import {
	badAddress,
	cannotConnect,
	connectionClosed,
	connectionClosedKey,
	connectRefused,
	connectSilent,
	lostConnection,
	lostSilent,
	movedLoop,
	notHoldline,
	notResp,
	proclaimEnded,
	reattachFailed,
	replyTooLarge,
	slotUnserved,
	tlsFailed,
	tokenMissing,
	tokenRefused,
	badUser,
	userWithoutToken,
	waitSilent,
} from '../src/texts.js'
import { isTableText, isText, TABLE, tableText, type Values } from './texts.js'

function decodeAll(bytes: string, chunk = Infinity): Array<Reply | RespPush> {
	const frames: Array<Reply | RespPush> = []
	const decoder = new Decoder(f => frames.push(f))
	const buf = Buffer.from(bytes)
	for (let i = 0; i < buf.length; i += Math.min(chunk, buf.length)) decoder.push(buf.subarray(i, i + chunk))
	return frames
}

test('commands are arrays of bulk strings, counted in bytes', () => {
	assert.equal(encodeCommand(['HOLD', 'inv', 'é', 'WAIT', 30000]).toString(), '*5\r\n$4\r\nHOLD\r\n$3\r\ninv\r\n$2\r\né\r\n$4\r\nWAIT\r\n$5\r\n30000\r\n')
	assert.equal(encodeCommand(['RELEASE', 2n ** 63n - 1n]).toString(), '*2\r\n$7\r\nRELEASE\r\n$19\r\n9223372036854775807\r\n')
})

test('every RESP3 type decodes, whole or a byte at a time', () => {
	const wire =
		'*2\r\n:7\r\n:9223372036854775807\r\n' +
		'-INUSE lock invoices: key "9": held past the hold\'s wait: in use\r\n' +
		'_\r\n$-1\r\n*-1\r\n+OK\r\n$4\r\nhé!\r\n' +
		'%2\r\n+server\r\n$8\r\nholdline\r\n+proto\r\n:3\r\n' +
		'>3\r\n$4\r\nlost\r\n:12\r\n$5\r\ngone.\r\n' +
		'#t\r\n,1.5\r\n(123456789012345678901234567890\r\n~1\r\n+a\r\n=8\r\ntxt:abcd\r\n!7\r\nERR bad\r\n' +
		'|1\r\n+ttl\r\n:3\r\n+after-attribute\r\n'
	for (const chunk of [Infinity, 1, 3]) {
		const frames = decodeAll(wire, chunk)
		assert.equal(frames.length, 16, `chunk ${chunk}`)
		assert.deepEqual(frames[0], [7n, 9223372036854775807n])
		assert.deepEqual(frames[1], new RespError('INUSE', 'lock invoices: key "9": held past the hold\'s wait: in use'))
		assert.deepEqual(frames.slice(2, 6), [null, null, null, 'OK'])
		assert.equal(frames[6], 'hé!')
		assert.deepEqual(
			frames[7],
			new Map<Reply, Reply>([
				['server', 'holdline'],
				['proto', 3n],
			]),
		)
		assert.ok(frames[8] instanceof RespPush)
		assert.deepEqual((frames[8] as RespPush).items, ['lost', 12n, 'gone.'])
		assert.deepEqual(frames.slice(9), [true, 1.5, 123456789012345678901234567890n, ['a'], 'abcd', new RespError('ERR', 'bad'), 'after-attribute'])
	}
})

test('a frame that is not RESP throws rather than guessing', () => {
	// At once, from the first byte, and quoting the first 10 bytes.
	assert.throws(
		() => decodeAll('?what'),
		(e: unknown) => e instanceof RespNotResp && e.head.toString() === '?what',
	)
	assert.throws(
		() => decodeAll(':12x\r\n'),
		(e: unknown) => e instanceof RespNotResp && e.head.toString() === ':12x\r\n',
	)
	assert.throws(
		() => decodeAll('$999999999999\r\n'),
		(e: unknown) => e instanceof RespTooLarge && e.size === 999999999999n,
	)
	assert.throws(
		() => decodeAll('*99999999\r\n'),
		(e: unknown) => e instanceof RespTooLarge && e.size === 299999997n,
	)
})

test('durations as text, or milliseconds', () => {
	assert.equal(toMillis('10s', 'ttl', 'l'), 10_000)
	assert.equal(toMillis('2m', 'ttl', 'l'), 120_000)
	assert.equal(toMillis('500ms', 'ttl', 'l'), 500)
	assert.equal(toMillis('1h', 'ttl', 'l'), 3_600_000)
	assert.equal(toMillis('1m30s', 'ttl', 'l'), 90_000)
	assert.equal(toMillis('1.5s', 'ttl', 'l'), 1500)
	assert.equal(toMillis('0.5ms', 'ttl', 'l'), 1)
	assert.equal(toMillis(250, 'ttl', 'l'), 250)
	assert.equal(toMillis(0, 'wait', 'l'), 0)
	assert.equal(toMillis('0s', 'wait', 'l'), 0)
	for (const bad of ['10', '10x', 's', '', ' 10s', '10s ', '-1s', '1e3ms', -1, NaN, Infinity, null, {}, '10 s']) {
		assert.throws(
			() => toMillis(bad, 'ttl', 'invoices'),
			(e: unknown) => e instanceof HoldlineError && e.kind === 'invalid' && e.message.startsWith('lock invoices: a ttl is a duration such as'),
			String(bad),
		)
	}
	assert.equal(
		catchMessage(() => toMillis('10x', 'wait', 'invoices', '9')),
		`lock invoices: key "9": a wait is a duration such as '10s', '2m' or '500ms', or a number of milliseconds, not "10x": invalid`,
	)
	assert.equal(
		catchMessage(() => toPositiveMillis(0, 'ttl', 'invoices')),
		'lock invoices: a ttl is at least 1ms: invalid',
	)
	assert.equal(
		catchMessage(() => toPositiveMillis('0s', 'maxHold', 'invoices')),
		'lock invoices: a maxHold is at least 1ms: invalid',
	)
})

test('error texts have the core shape', () => {
	assert.equal(errorFor('in use', "held past the hold's wait", 'invoices', '9').message, 'lock invoices: key "9": held past the hold\'s wait: in use')
	assert.equal(errorFor('lost', 'it was revoked at its maxHold', 'invoices', 'm').message, 'lock invoices: key "m": the lease was lost: it was revoked at its maxHold')
	assert.equal(errorFor('closed', 'the store is closed', 'invoices').message, 'lock invoices: the store is closed: closed')
	assert.equal(errorFor('closed', 'cannot connect').message, 'store: cannot connect: closed')
	assert.equal(showKey('a"b\\c\nd\te'), '"a\\"b\\\\c\\nd\\te"')
	assert.equal(showKey('x'.repeat(64)), `"${'x'.repeat(64)}"`)
	assert.equal(showKey('é'.repeat(65)), `"${'é'.repeat(64)}..."`)
	assert.equal(showKey('\u0085'), '"\\u{85}"')
})

test('server errors keep their text; the first word gives the kind', () => {
	const cases: Array<[string, string]> = [
		['INUSE', 'in use'],
		['LOST', 'lost'],
		['LIMIT', 'limit'],
		['INVALID', 'invalid'],
		['CLOSED', 'closed'],
	]
	for (const [word, kind] of cases) {
		const e = fromServer(word, 'lock a: key "b": text')
		assert.equal(e.kind, kind)
		assert.equal(e.message, 'lock a: key "b": text')
		assert.ok(e instanceof Error && e.name === 'HoldlineError')
	}
	const other = fromServer('ERR', "unknown command 'HOLD'")
	assert.equal(other.kind, 'invalid')
	assert.equal(other.message, "ERR unknown command 'HOLD'")
})

test('addresses: the accepted forms', () => {
	const port = TABLE.rules.default_port
	assert.equal(DEFAULT_PORT, port)
	const cases: Array<[string, object]> = [
		['127.0.0.1:7381', { host: '127.0.0.1', port: 7381 }],
		['localhost', { host: 'localhost', port }],
		['db-1.example.com:9000', { host: 'db-1.example.com', port: 9000 }],
		['[::1]:9000', { host: '::1', port: 9000 }],
		['[::1]', { host: '::1', port }],
		['redis://127.0.0.1', { host: '127.0.0.1', port }],
		['redis://127.0.0.1:27400', { host: '127.0.0.1', port: 27400 }],
		['redis://[::1]:27400', { host: '::1', port: 27400 }],
		['redis://:s3cret@host:1', { host: 'host', port: 1, token: 's3cret' }],
		['redis://:a%40b%3Ac@host', { host: 'host', port, token: 'a@b:c' }],
		['redis://:a@b@host', { host: 'host', port, token: 'a@b' }],
		['rediss://127.0.0.1', { host: '127.0.0.1', port, tls: true }],
		['rediss://[::1]:27400', { host: '::1', port: 27400, tls: true }],
		['rediss://:s3cret@host:1', { host: 'host', port: 1, token: 's3cret', tls: true }],
		['redis://alice:s3cret@host:1', { host: 'host', port: 1, user: 'alice', token: 's3cret' }],
		['rediss://alice:s3cret@host', { host: 'host', port, user: 'alice', token: 's3cret', tls: true }],
		['redis://default:s3cret@host', { host: 'host', port, user: 'default', token: 's3cret' }],
		['redis://alice:tok:en@host', { host: 'host', port, user: 'alice', token: 'tok:en' }],
		['redis://a%3Ab%40c:t@host', { host: 'host', port, user: 'a:b@c', token: 't' }],
		['redis://a@b:t@host', { host: 'host', port, user: 'a@b', token: 't' }],
		[`redis://${'u'.repeat(64)}:t@host`, { host: 'host', port, user: 'u'.repeat(64), token: 't' }],
	]
	for (const [text, address] of cases) assert.deepEqual(parseAddress(text), address, text)
	assert.equal(showAddress({ host: '::1', port: 7380 }), '[::1]:7380')
	assert.equal(showAddress({ host: 'h', port: 1 }), 'h:1')
})

test('addresses: anything else fails invalid with the bad_address text', () => {
	const bad = [
		'',
		':9000',
		'a:b',
		'a:70000',
		'a:0',
		'::1',
		'::1:80',
		'a b:1',
		'host:',
		'[::1',
		'[nothex]:1',
		'[::1]:x',
		'http://host',
		'redis://',
		'rediss://',
		'redisss://host',
		'rediss:/host',
		'rediss://user@host',
		'redis://user@host',
		'redis://user:@host',
		'redis://us er:tok@host',
		'redis://us%20er:tok@host',
		'redis://é:tok@host',
		`redis://${'u'.repeat(65)}:t@h`,
		'redis://:@host',
		'redis://host/0',
		'redis://:%zz@host',
		'redis//host',
		'host:7380 ',
		`${'x'.repeat(70)}:`,
	]
	for (const text of bad) assert.throws(() => parseAddress(text), isText('invalid', 'bad_address', { address: showKey(text) }), text)
	assert.equal(
		catchMessage(() => parseAddress('a\nb')),
		tableText('bad_address', { address: '"a\\nb"' }),
	)
	assert.equal(
		catchMessage(() => parseAddress(`${'y'.repeat(64)} z`)),
		tableText('bad_address', { address: `"${'y'.repeat(64)}..."` }),
	)
})

test('several addresses: separated by commas, or a list; each one checked', () => {
	assert.deepEqual(parseAddresses('127.0.0.1:7001,127.0.0.1:7002'), [
		{ host: '127.0.0.1', port: 7001 },
		{ host: '127.0.0.1', port: 7002 },
	])
	assert.deepEqual(parseAddresses(['redis://:t@a:1', '[::1]:2', 'b']), [
		{ host: 'a', port: 1, token: 't' },
		{ host: '::1', port: 2 },
		{ host: 'b', port: TABLE.rules.default_port },
	])
	assert.deepEqual(parseAddresses('rediss://a:1,b:2'), [
		{ host: 'a', port: 1, tls: true },
		{ host: 'b', port: 2 },
	])
	assert.deepEqual(parseAddresses('h'), [{ host: 'h', port: TABLE.rules.default_port }])
	for (const [text, part] of [
		['a:1,', ''],
		['a:1,,b:2', ''],
		['a:1, b:2', ' b:2'],
		['a:1,http://b', 'http://b'],
	] as const) {
		assert.throws(() => parseAddresses(text), isText('invalid', 'bad_address', { address: showKey(part) }), text)
	}
	assert.throws(() => parseAddresses([]), isText('invalid', 'bad_address', { address: '""' }))
	assert.throws(() => parseAddresses(['a:1', 7 as never]), isText('invalid', 'bad_address', { address: '"7"' }))
})

test("slots: Redis Cluster's CRC16 and hash tags, its own test vectors", () => {
	assert.equal(SLOTS, 16384)
	assert.equal(crc16(Buffer.from('123456789')), 0x31c3)
	assert.equal(slotOf('123456789'), 12739)
	assert.equal(slotOf('foo'), 12182)
	assert.equal(slotOf('{user1000}.following'), slotOf('{user1000}.followers'))
	assert.equal(slotOf('{user1000}.following'), slotOf('user1000'))
	assert.equal(slotOf('foo{}{bar}'), crc16(Buffer.from('foo{}{bar}')) % SLOTS)
	assert.equal(slotOf('foo{{bar}}zap'), slotOf('{bar'))
	assert.equal(slotOf('{inv-7}:status'), slotOf('{inv-7}'))
	assert.equal(slotOf('{inv-7}'), slotOf('inv-7'))
	// The UTF-8 bytes, not the UTF-16 units; a key with no tag is hashed whole.
	assert.equal(slotOf('é'), crc16(Buffer.from([0xc3, 0xa9])) % SLOTS)
	assert.equal(slotOf('a{b'), crc16(Buffer.from('a{b')) % SLOTS)
	assert.equal(slotOf(''), 0)
})

test('MOVED targets, and the counts of the routing rules', () => {
	assert.deepEqual(movedTarget('12182 127.0.0.1:7002'), { slot: 12182, address: { host: '127.0.0.1', port: 7002 } })
	assert.deepEqual(movedTarget('1 [::1]:7002'), { slot: 1, address: { host: '::1', port: 7002 } })
	assert.deepEqual(movedTarget('1 ::1:7002'), { slot: 1, address: { host: '::1', port: 7002 } })
	for (const bad of ['', '1', '1 host', 'x h:1', '1 h:0', '1 h:70000', '1 :1']) assert.equal(movedTarget(bad), undefined, bad)
	const rules = TABLE.rules as unknown as Record<string, number>
	assert.equal(MAX_REDIRECTS, rules.max_redirects)
	assert.equal(CLUSTER_DOWN_TRIES, rules.cluster_down_tries)
	assert.equal(CLUSTER_DOWN_PAUSE_MS, rules.cluster_down_pause_ms)
	assert.equal(MAP_REFRESH_NODE_TIMEOUT_MS, rules.map_refresh_node_timeout_ms)
})

test('durations are written as the core writes them', () => {
	const cases: Array<[number, string]> = [
		[0, '0s'],
		[1, '1ms'],
		[300, '300ms'],
		[1000, '1s'],
		[1500, '1500ms'],
		[2000, '2s'],
		[60_000, '1m'],
		[90_000, '90s'],
		[3_600_000, '60m'],
	]
	for (const [ms, text] of cases) assert.equal(showMs(ms), text, String(ms))
})

test('the timing rules every client shares', () => {
	assert.equal(DEFAULT_CONNECT_TIMEOUT_MS, TABLE.rules.connect_timeout_ms)
	assert.equal(MAX_REPLY_BYTES, TABLE.rules.max_reply_bytes)
	// max(10ms, ttl / 10)
	assert.equal(lostMarginMs(2000), 200)
	assert.equal(lostMarginMs(50), 10)
	assert.equal(lostMarginMs(100), 10)
	// wait + max(ttl, 1s)
	assert.equal(waitGraceMs(2000), 2000)
	assert.equal(waitGraceMs(300), 1000)
})

test('every client-made text is the table text, byte for byte', () => {
	const key = 'a"b'
	const k = showKey(key)
	const made: Array<[HoldlineError, string, Values]> = [
		[badAddress('http://h'), 'bad_address', { address: '"http://h"' }],
		[badUser('a b'), 'bad_user', { user: '"a b"' }],
		[userWithoutToken('alice'), 'user_without_token', { user: '"alice"' }],
		[cannotConnect('[::1]:7380', 'connect ECONNREFUSED ::1:7380'), 'cannot_connect', { hostport: '[::1]:7380' }],
		[connectSilent('h:1', 10_000), 'connect_silent', { hostport: 'h:1', timeout: '10s' }],
		[tokenMissing(), 'token_missing', {}],
		[tokenRefused(), 'token_refused', {}],
		[connectRefused('h:1', 'ERR max number of clients reached'), 'connect_refused', { hostport: 'h:1' }],
		[tlsFailed('h:1', 'tlsv13 alert certificate required'), 'tls_failed', { hostport: 'h:1' }],
		[connectionClosed(), 'connection_closed', {}],
		[connectionClosedKey('inv', key), 'connection_closed_key', { lock: 'inv', key: k }],
		[lostConnection('inv', key), 'lost_connection', { lock: 'inv', key: k }],
		[lostSilent('inv', key, 2000), 'lost_silent', { lock: 'inv', key: k, ttl: '2s' }],
		[waitSilent('inv', key, 3000, 1000), 'wait_silent', { lock: 'inv', key: k, wait: '3s', ttl: '1s' }],
		[movedLoop('inv', key), 'moved_loop', { lock: 'inv', key: k }],
		[slotUnserved('inv', key, 16383), 'slot_unserved', { lock: 'inv', key: k, slot: '16383' }],
		[notHoldline('h:1', 'redis 7.0.15'), 'not_holdline', { hostport: 'h:1', server: 'redis 7.0.15' }],
		[notHoldline('h:1', undefined), 'not_holdline_unnamed', { hostport: 'h:1' }],
		[notResp('h:1', Buffer.from('HTTP/1.1 400 Bad Request')), 'not_resp', { hostport: 'h:1', bytes: '"HTTP/1.1 4"' }],
		[replyTooLarge('h:1', 999999999999n, 67108864), 'reply_too_large', { hostport: 'h:1', size: '999999999999', limit: '67108864' }],
		[proclaimEnded('inv', key), 'proclaim_ended', { lock: 'inv', key: k }],
		[reattachFailed('inv', key), 'reattach_failed', { lock: 'inv', key: k }],
	]
	assert.deepEqual(made.map(([, name]) => name).sort(), Object.keys(TABLE.texts).sort(), 'every text of the table is made here')
	for (const [error, name, values] of made) {
		if (name === 'cannot_connect') assert.equal(error.message, 'store: cannot connect to [::1]:7380 (connect ECONNREFUSED ::1:7380): closed')
		else if (name === 'connect_refused') assert.equal(error.message, 'store: the server at h:1 refused the connection (ERR max number of clients reached): closed')
		else if (name === 'tls_failed') assert.equal(error.message, 'store: TLS with h:1 failed (tlsv13 alert certificate required): closed')
		else assert.equal(error.message, tableText(name, values), name)
		assert.ok(isTableText(error.message, name, values), name)
	}
	// The kind is the text's last word, or lost for the lost texts.
	for (const [error, name] of made) assert.ok(error.message.endsWith(`: ${error.kind}`) || (error.kind === 'lost' && (name.startsWith('lost') || name === 'reattach_failed')), name)
})

function catchMessage(f: () => unknown): string {
	try {
		f()
	} catch (e) {
		return (e as Error).message
	}
	throw new Error('did not throw')
}

test("a lease's deadline: answers before it move it on, an answer after it moves nothing, a passed deadline is final", t => {
	// The lease reads its clock through performance.now(); here that clock
	// moves only when the test moves it, so a pause of this process (a loaded
	// machine) cannot carry a look past a deadline. No timer of the lease runs
	// in between either: the test never yields, so only the looks decide.
	let clockMs = performance.now()
	t.mock.method(performance, 'now', () => clockMs)
	const pass = (ms: number) => {
		clockMs += ms
	}
	const lapses: string[] = []
	const clock = (name: string) => ({
		spanMs: 60,
		lapsed: () => new HoldlineError('lost', `${name} lapsed`),
		onLapse: () => void lapses.push(name),
	})
	const moved = new Lease('k', 1n, 1n)
	moved.startClock(now() + 60, clock('moved'))
	pass(30)
	moved.answered(now()) // before the deadline: now + 60
	pass(45) // past the first deadline, not the moved one
	assert.equal(moved.lost, false)
	pass(14) // the last millisecond before the moved deadline
	assert.equal(moved.lost, false)
	moved.settle() // its function ended: no more clock
	const late = new Lease('k', 2n, 2n)
	late.startClock(now() + 30, clock('late'))
	pass(29)
	assert.equal(late.lost, false)
	// Past the deadline: an answer read now moves nothing.
	pass(16)
	late.answered(now())
	assert.equal(late.lost, true)
	assert.equal((late.signal.reason as Error).message, 'late lapsed')
	// An answer moves the deadline to its command's send plus the span, not
	// to its arrival plus the span; one that arrives at the deadline, nothing.
	const sent = new Lease('k', 3n, 3n)
	sent.startClock(now() + 60, clock('sent'))
	pass(30)
	sent.answered(now() - 20) // sent 10 ms in: the deadline moves to 70
	pass(39)
	assert.equal(sent.lost, false)
	sent.answered(now() - 1) // sent at 68, read at 69: the deadline moves to 128
	pass(59) // at 128: lost (from the arrival it would have been 129)
	assert.equal(sent.lost, true)
	const edge = new Lease('k', 4n, 4n)
	edge.startClock(now() + 60, clock('edge'))
	pass(60)
	edge.answered(now() - 1) // arrives at the deadline: moves nothing
	assert.equal(edge.lost, true)
	pass(60)
	assert.equal(moved.lost, false)
	assert.deepEqual(lapses, ['late', 'sent', 'edge'])
})
