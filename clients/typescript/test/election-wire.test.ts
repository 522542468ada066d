/**
 * Notes and elections against scripted nodes: the words sent (`NOTE` on
 * holds only when given, a campaign's `HOLD`, proclaim's `NOTE`, resign's
 * one `RELEASE`), and `election.observe()`, for what a real server does
 * only by chance or in a cluster: the observation closed by the server
 * (`closed`), `MOVED` and `CLUSTERDOWN` answered to `OBSERVE`, a
 * connection dropped before `OBSERVE` was answered, an observing
 * connection gone silent, news of other keys and of ends that are not the
 * leader's, and the refusals that end an observation (RESP2, `NOPERM`).
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type Leader, type Store } from '../src/index.js'
import { closedAfterEach, fakeNode, keyIn, type FakeNode } from './fakenode.js'
import { until } from './server.js'

const closeAfterTest = closedAfterEach()

async function node(): Promise<FakeNode> {
	return closeAfterTest(await fakeNode())
}

async function store(address: string): Promise<Store> {
	return closeAfterTest(await connect(address, { connectTimeout: '2s' }))
}

const bulk = (text: string) => `$${Buffer.byteLength(text)}\r\n${text}\r\n`

/** An `observe` push: `["observe", lock, key, event, fence, permits, holder, note]`. */
function push(lock: string, key: string, event: string, fence: number, note = '', holder = 3): string {
	return `>8\r\n${bulk('observe')}${bulk(lock)}${bulk(key)}${bulk(event)}:${fence}\r\n:1\r\n:${holder}\r\n${bulk(note)}`
}

/** The next `count` items of `it`, each within `ms`. */
async function take(it: AsyncIterator<Leader | null>, count: number, ms = 5000): Promise<Array<Leader | null>> {
	const items: Array<Leader | null> = []
	while (items.length < count) {
		let timer: NodeJS.Timeout | undefined
		const next = await Promise.race([
			it.next(),
			new Promise<never>((_, reject) => {
				timer = setTimeout(() => reject(new Error(`${items.length} items within ${ms} ms: ${JSON.stringify(items, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`)), ms)
			}),
		]).finally(() => clearTimeout(timer))
		assert.equal(next.done, false, 'the observation ended')
		items.push(next.value as Leader | null)
	}
	return items
}

const leader = (fence: bigint, note: string): Leader => ({ note, fence, heldForMs: null })

test("observe reads the present state, then grants, proclaims and the leader's end; another key's news and an older lease's end change nothing", async () => {
	const n = await node()
	n.script = args =>
		args[0] === 'OBSERVE'
			? `+OK\r\n${push('e', 'k', 'free', 4)}${push('e', 'other', 'granted', 9, 'not ours')}${push('e', 'k', 'granted', 5, 'a:1')}` +
				`${push('e', 'k', 'held', 5, 'a:2')}${push('e', 'k', 'expired', 4)}${push('e', 'k', 'released', 5, 'a:2')}${push('e', 'k', 'granted', 6, 'b')}${push('e', 'k', 'disconnected', 6, 'b')}`
			: undefined
	const s = await store(n.address)
	const observer = s.lock('e').election('k').observe()
	assert.deepEqual(await take(observer, 6), [null, leader(5n, 'a:1'), leader(5n, 'a:2'), null, leader(6n, 'b'), null])
	assert.deepEqual(
		n.seen.filter(args => args[0] === 'OBSERVE'),
		[['OBSERVE', 'e', 'k']],
	)
	await observer.return()
	await until('its connection closed', () => n.openConnections() === 0)
})

test('observe: the server closing the observation (closed), or dropping the connection before OBSERVE is answered, makes it observe again and yield the present state again', async () => {
	const n = await node()
	let observes = 0
	n.script = args => {
		if (args[0] !== 'OBSERVE') return undefined
		observes++
		if (observes === 1) return `+OK\r\n${push('e', 'k', 'held', 5, 'a')}${push('e', 'k', 'closed', 5, 'a')}`
		if (observes === 2) return null
		return `+OK\r\n${push('e', 'k', 'held', 5 + observes, 'b')}`
	}
	const s = await store(n.address)
	const observer = s.lock('e').election('k').observe()
	assert.deepEqual(await take(observer, 2), [leader(5n, 'a'), leader(8n, 'b')])
	assert.equal(observes, 3)
	await until('only the observing connection open', () => n.openConnections() === 1)
	await observer.return()
})

test('observe follows MOVED and CLUSTERDOWN answered to OBSERVE', async () => {
	const [a, b] = [await node(), await node()]
	a.layout = [{ start: 0, end: 16383, node: a }]
	const s = await store(a.address)
	a.layout = [
		{ start: 0, end: 8191, node: a },
		{ start: 8192, end: 16383, node: b },
	]
	b.layout = a.layout
	const key = keyIn(8192, 16383)
	let down = 0
	b.script = args => {
		if (args[0] !== 'OBSERVE') return undefined
		if (down++ === 0) return '-CLUSTERDOWN Hash slot not served\r\n'
		return `+OK\r\n${push('e', key, 'held', 7, 'on b')}`
	}
	const observer = s.lock('e').election(key).observe()
	assert.deepEqual(await take(observer, 1), [leader(7n, 'on b')])
	assert.deepEqual([a.count('OBSERVE'), b.count('OBSERVE')], [1, 2])
	assert.equal(s.redirects, 1)
	await observer.return()
})

test('observe: an observing connection whose PINGs go unanswered for a third of the ttl plus the ttl (1 s at least) is closed, and it observes again', async () => {
	const n = await node()
	let observes = 0
	n.script = args => {
		if (args[0] === 'OBSERVE') return `+OK\r\n${push('e', 'k', 'free', 4 + ++observes)}`
		// The first observing connection answers no PING; the later ones do.
		if (args[0] === 'PING' && observes === 1) return ''
		return undefined
	}
	const s = await store(n.address)
	const started = performance.now()
	const observer = s.lock('e', { ttl: '300ms' }).election('k').observe()
	assert.deepEqual(await take(observer, 2, 5000), [null, null])
	const tookMs = performance.now() - started
	assert.ok(tookMs >= 1000 && tookMs < 3000, `observed again after ${Math.round(tookMs)} ms`)
	assert.equal(observes, 2)
	assert.ok(n.count('PING') >= 10, `${n.count('PING')} PINGs, one every 100 ms`)
	await observer.return()
})

test('observe throws what the server refuses: a RESP2 connection, a lock the user may not use', async () => {
	const n = await node()
	n.script = args => (args[0] === 'OBSERVE' ? '-ERR OBSERVE needs RESP3: send HELLO 3 first\r\n' : undefined)
	const s = await store(n.address)
	await assert.rejects(take(s.lock('e').election('k').observe(), 1), (e: unknown) => e instanceof HoldlineError && e.kind === 'invalid' && e.message === 'ERR OBSERVE needs RESP3: send HELLO 3 first')
	n.script = args => (args[0] === 'OBSERVE' ? '-NOPERM user alice may not use lock "e"\r\n' : undefined)
	await assert.rejects(
		take(s.lock('e').election('k').observe(), 1),
		(e: unknown) => e instanceof HoldlineError && e.kind === 'invalid' && e.code === 'NOPERM' && e.message === 'NOPERM user alice may not use lock "e"',
	)
	assert.equal(n.count('OBSERVE'), 2, 'neither tried again')
	await until('no connection left observing', () => n.openConnections() <= 1)
})

test('observe: a server that drops every OBSERVE is tried again after 50 ms, then twice as long each time (up to 1 s), until the signal aborts', async () => {
	const n = await node()
	let observes = 0
	n.script = args => (args[0] === 'OBSERVE' && ++observes <= 4 ? null : undefined)
	const s = await store(n.address)
	const stop = new AbortController()
	const observer = s.lock('e').election('k').observe({ signal: stop.signal })
	const started = performance.now()
	const first = observer.next()
	await until('the fifth OBSERVE', () => observes === 5, 5000)
	const tookMs = performance.now() - started
	// Pauses of 50, 100, 200 and 400 ms between the five.
	assert.ok(tookMs >= 740 && tookMs < 2500, `five OBSERVEs within ${Math.round(tookMs)} ms`)
	stop.abort()
	assert.deepEqual(await first, { done: true, value: undefined }, 'the fifth answered OK but pushed nothing: the abort ends it')
})

test('the words sent: NOTE only when a hold is given one; a campaign HOLDs with WAIT 60000 and its note, proclaims with NOTE, and RELEASEs once', async () => {
	const n = await node()
	const s = await store(n.address)
	const lock = s.lock('l', { ttl: '2s' })
	await lock.hold('k', () => {})
	await lock.hold('k', () => {}, { note: 'job 1' })
	await lock.tryHold('k', () => {}, { note: 'job 2' })
	const e = s.lock('l', { ttl: '2s', permits: 3 }).election('e')
	await e.campaign('10.0.0.5:8080', async lead => {
		await lead.proclaim('10.0.0.5:9090')
		await lead.resign()
	})
	const words = n.seen.filter(args => !['HELLO', 'CLUSTER', 'PING', 'RENEW'].includes(args[0]!))
	// The scripted node's lease ids are the grant's place among the commands it read, from 1.
	const leases = n.seen.flatMap((args, i) => (args[0] === 'HOLD' || args[0] === 'TRYHOLD' ? [String(i + 1)] : []))
	assert.deepEqual(words, [
		['HOLD', 'l', 'k', 'WAIT', '10000', 'TTL', '2000'],
		['RELEASE', leases[0]],
		['HOLD', 'l', 'k', 'WAIT', '10000', 'TTL', '2000', 'NOTE', 'job 1'],
		['RELEASE', leases[1]],
		['TRYHOLD', 'l', 'k', 'TTL', '2000', 'NOTE', 'job 2'],
		['RELEASE', leases[2]],
		['HOLD', 'l', 'e', 'WAIT', '60000', 'TTL', '2000', 'PERMITS', '3', 'TAKE', 'ALL', 'NOTE', '10.0.0.5:8080'],
		['NOTE', leases[3], '10.0.0.5:9090'],
		['RELEASE', leases[3]],
	])
})
