/**
 * Cluster routing against scripted nodes: the map learned at connect, each
 * command sent to its slot's node, `MOVED` followed, `CLUSTERDOWN` waited
 * out, a node that fails, a node silent while the map is asked for again,
 * `STATS` summed over the nodes, the two texts of too many redirects, a
 * hold's wait running from its call and the hold bounded as a whole, and
 * a single node (`CLUSTER SLOTS` answered with an error) left as it was.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type Store } from '../src/index.js'
import { slotOf } from '../src/slots.js'
import { closedAfterEach, delayed, fakeNode, keyIn, type FakeNode } from './fakenode.js'
import { refusedAddress, until, whenLost } from './server.js'
import { isText, TABLE } from './texts.js'

const closeAfterTest = closedAfterEach()

async function nodes(count: number): Promise<FakeNode[]> {
	const made = await Promise.all(Array.from({ length: count }, () => fakeNode()))
	for (const node of made) closeAfterTest(node)
	return made
}

const CLUSTERDOWN = '-CLUSTERDOWN Hash slot not served\r\n'

/** One node serving every slot, whose first `downs` HOLDs answer CLUSTERDOWN. */
async function downThenServed(downs: number): Promise<FakeNode> {
	const [a] = (await nodes(1)) as [FakeNode]
	a.layout = [{ start: 0, end: 16383, node: a }]
	let seen = 0
	a.script = args => (args[0] === 'HOLD' && seen++ < downs ? CLUSTERDOWN : undefined)
	return a
}

async function store(address: string | string[], options = {}): Promise<Store> {
	return closeAfterTest(await connect(address, options))
}

/** Two nodes splitting the slots in halves, both knowing it. */
async function halves(): Promise<[FakeNode, FakeNode]> {
	const [a, b] = (await nodes(2)) as [FakeNode, FakeNode]
	const layout = [
		{ start: 0, end: 8191, node: a },
		{ start: 8192, end: 16383, node: b },
	]
	a.layout = layout
	b.layout = layout
	return [a, b]
}

const LOW = keyIn(0, 8191)
const HIGH = keyIn(8192, 16383)

test('a single node: CLUSTER SLOTS answered with an error once at connect, then every command to that node', async () => {
	const [single] = (await nodes(1)) as [FakeNode]
	const s = await store(single.address)
	const invoices = s.lock('invoices')
	for (const key of [LOW, HIGH, 'foo']) assert.equal(await invoices.hold(key, lease => lease.key), key)
	assert.equal(await invoices.inspect(HIGH), null)
	await s.put('invoices', HIGH, 5n, 'row', 'v')
	assert.equal(await s.get('row'), null)
	assert.equal(single.count('CLUSTER SLOTS'), 1)
	assert.equal(single.count('CLUSTER'), 1)
	assert.equal(single.count('HOLD'), 3)
	assert.equal(s.address, single.address)
	assert.equal(s.clustered, false)
})

test("cluster: connected through one node, each hold, inspect, put and get goes to its slot's node, no MOVED needed", async () => {
	const [a, b] = await halves()
	const s = await store(a.address)
	const invoices = s.lock('invoices')
	assert.equal(await invoices.hold(LOW, lease => lease.key), LOW)
	assert.equal(await invoices.hold(HIGH, lease => lease.key), HIGH)
	assert.deepEqual(
		a.seen.filter(c => c[0] === 'HOLD').map(c => c[2]),
		[LOW],
	)
	assert.deepEqual(
		b.seen.filter(c => c[0] === 'HOLD').map(c => c[2]),
		[HIGH],
	)
	assert.equal(await invoices.inspect(HIGH), null)
	assert.equal(b.count('INSPECT'), 1)
	// PUT goes by its key's slot, GET by its row's: a hash tag puts both on one node.
	const tag = slotOf('{inv-7}') < 8192 ? a : b
	await s.put('invoices', '{inv-7}', 5n, '{inv-7}:status', 'paid')
	assert.equal(await s.get('{inv-7}:status'), null)
	assert.equal(tag.count('PUT') + tag.count('GET'), 2)
	// Only the node reached at connect was asked for the map; neither answered MOVED.
	assert.equal(a.count('CLUSTER SLOTS') + b.count('CLUSTER SLOTS'), 1)
	assert.equal(a.count('HOLD') + b.count('HOLD'), 2)
	assert.equal(s.address, a.address)
	assert.equal(s.clustered, true)
	assert.equal(s.redirects, 0)
})

test('MOVED: the command goes to the node named, that slot is noted, and the map asked for again', async () => {
	const [a, b] = (await nodes(2)) as [FakeNode, FakeNode]
	// At connect a serves every slot; then b takes the upper half over.
	a.layout = [{ start: 0, end: 16383, node: a }]
	const s = await store(a.address, { connectTimeout: '1s' })
	a.layout = [
		{ start: 0, end: 8191, node: a },
		{ start: 8192, end: 16383, node: b },
	]
	b.layout = a.layout
	// a leaves the map asked for again unanswered: until that gives up (1 s), only MOVED teaches the client.
	a.script = args => (args[0] === 'CLUSTER' ? '' : undefined)
	const invoices = s.lock('invoices')
	const tag = `{${HIGH}}`
	assert.equal(await invoices.hold(`${tag}.1`, lease => lease.fence > 0n), true)
	assert.deepEqual([a.count('HOLD'), b.count('HOLD')], [1, 1])
	assert.equal(await invoices.hold(`${tag}.2`, () => 'same slot'), 'same slot')
	assert.deepEqual([a.count('HOLD'), b.count('HOLD')], [1, 2], 'the noted slot went straight to b')
	await invoices.hold(keyIn(8192, 16383, 'other'), () => undefined)
	assert.deepEqual([a.count('HOLD'), b.count('HOLD')], [2, 3], "another slot of b's went to a first")
	assert.equal(s.redirects, 2)
	assert.equal(a.count('CLUSTER SLOTS'), 2, 'the map asked for again once (one at a time)')
	// a gave no answer: b, a node known from MOVED, is asked next, and its map is taken.
	await until('b asked for the map', () => b.count('CLUSTER SLOTS') === 1, 5000)
	let i = 0
	await until("every slot of b's goes straight to b", async () => {
		const before = a.count('HOLD')
		await invoices.hold(keyIn(8192, 16383, `then${i++}-`), () => undefined)
		return a.count('HOLD') === before
	})
})

test('moved_loop: two nodes sending a key to each other fail it at the 6th MOVED (5 followed), byte for byte', async () => {
	const [a, b] = (await nodes(2)) as [FakeNode, FakeNode]
	a.layout = [{ start: 0, end: 16383, node: a }]
	b.layout = a.layout
	for (const [node, other] of [
		[a, b],
		[b, a],
	] as const) {
		node.script = args => (['HOLD', 'TRYHOLD', 'INSPECT'].includes(args[0]!) ? `-MOVED ${slotOf(args[2]!)} ${other.address}\r\n` : undefined)
	}
	const s = await store(a.address)
	const invoices = s.lock('invoices')
	await assert.rejects(
		invoices.hold('k"1', () => 1),
		isText('closed', 'moved_loop', { lock: 'invoices', key: '"k\\"1"' }),
	)
	assert.equal(a.count('HOLD') + b.count('HOLD'), 6)
	await assert.rejects(
		invoices.tryHold('k', () => 1),
		isText('closed', 'moved_loop', { lock: 'invoices', key: '"k"' }),
	)
	assert.equal(a.count('TRYHOLD') + b.count('TRYHOLD'), 6)
	await assert.rejects(invoices.inspect('k'), isText('closed', 'moved_loop', { lock: 'invoices', key: '"k"' }))
	assert.equal(a.count('INSPECT') + b.count('INSPECT'), 6)
})

test('slot_unserved: CLUSTERDOWN ten times, the map asked for after each, 100 ms apart, byte for byte', async () => {
	const [a] = (await nodes(1)) as [FakeNode]
	// a serves nothing: every keyed command answers CLUSTERDOWN.
	const other = closeAfterTest(await fakeNode())
	a.layout = [{ start: 0, end: 0, node: other }]
	const s = await store(a.address)
	const key = keyIn(1, 16383)
	const began = performance.now()
	await assert.rejects(
		s.lock('invoices').hold(key, () => 1),
		isText('closed', 'slot_unserved', { lock: 'invoices', key: JSON.stringify(key), slot: String(slotOf(key)) }),
	)
	assert.ok(performance.now() - began >= 9 * 100 - 20, `${performance.now() - began} ms`)
	assert.equal(a.count('HOLD'), 10)
	// Once at connect, then after each of the first nine CLUSTERDOWNs.
	assert.equal(a.count('CLUSTER SLOTS'), 10)
	// GET names its row as the key, the store for the lock.
	await assert.rejects(s.get(key), (e: unknown) => {
		assert.ok(e instanceof HoldlineError && e.kind === 'closed')
		assert.equal(e.message, `store: key ${JSON.stringify(key)}: no node serves its slot (${slotOf(key)}) after 10 tries: closed`)
		return true
	})
})

test("CLUSTERDOWN, then served: the lease's clock starts at the send of the HOLD granted, not the first", async () => {
	const a = await downThenServed(4)
	const s = await store(a.address)
	// Four pauses of 100 ms: far past the first HOLD's ttl less its margin (270 ms).
	const began = performance.now()
	const renewsAtStart = await s.lock('invoices', { ttl: '300ms' }).hold('k', lease => {
		assert.equal(lease.lost, false)
		return a.count('RENEW')
	})
	assert.ok(performance.now() - began >= 400, 'waited out four CLUSTERDOWNs')
	// A grant past its first deadline would have been confirmed by a RENEW before the function ran.
	assert.equal(renewsAtStart, 0)
	assert.equal(a.count('HOLD'), 5)
})

test('wait left: a HOLD sent again after a CLUSTERDOWN carries the wait left, less each pause', async () => {
	const a = await downThenServed(2)
	const s = await store(a.address)
	assert.equal(await s.lock('invoices').hold('k', () => 'held', { wait: '2s' }), 'held')
	const waits = a.seen.filter(c => c[0] === 'HOLD').map(c => Number(c[4]))
	assert.equal(waits.length, 3, `WAITs ${waits}`)
	assert.equal(waits[0], 2000, 'the first HOLD carries the wait as given')
	const pause = (TABLE.rules as unknown as Record<string, number>).cluster_down_pause_ms!
	for (let i = 1; i < waits.length; i++) assert.ok(waits[i]! <= waits[i - 1]! - pause, `WAITs ${waits}: each less the pause`)
})

test('bounded: a hold retried after slow CLUSTERDOWNs fails wait_silent at its call + wait + grace, and sends nothing after', async () => {
	const [a] = (await nodes(1)) as [FakeNode]
	a.layout = [{ start: 0, end: 16383, node: a }]
	// Each HOLD answered CLUSTERDOWN 400 ms late, for ever: ten tries would take about 5 s.
	a.script = args => (args[0] === 'HOLD' ? delayed(400, CLUSTERDOWN) : undefined)
	const s = await store(a.address)
	const began = performance.now()
	await assert.rejects(
		s.lock('invoices', { ttl: '1000ms' }).hold('k', () => 1, { wait: '600ms' }),
		isText('closed', 'wait_silent', { lock: 'invoices', key: '"k"', wait: '600ms', ttl: '1s' }),
	)
	const took = performance.now() - began
	assert.ok(took >= 1500 && took < 3000, `took ${took} ms (bound: 600 ms + 1 s)`)
	const sent = a.count('HOLD')
	await new Promise(resolve => setTimeout(resolve, 500))
	assert.equal(a.count('HOLD'), sent, 'no HOLD sent after the hold was given up')
})

test('a node that cannot be reached: cannot_connect naming it, the map asked for again, the next hold to the new owner', async () => {
	const [a] = (await nodes(1)) as [FakeNode]
	// In the map, nothing listening there (the store dials a node only once it sends it something).
	await using b = await refusedAddress()
	a.layout = [
		{ start: 0, end: 8191, node: a },
		{ start: 8192, end: 16383, node: b },
	]
	const s = await store(a.address)
	const before = a.count('CLUSTER SLOTS')
	await assert.rejects(
		s.lock('invoices').hold(HIGH, () => 1),
		isText('closed', 'cannot_connect', { hostport: b.address }),
	)
	await until('the map asked for again', () => a.count('CLUSTER SLOTS') > before)
	// a takes b's slots over; holds fail cannot_connect until the map asked for says so.
	a.layout = [{ start: 0, end: 16383, node: a }]
	let failures = 0
	await until('a hold granted by a', async () => {
		const held = await s
			.lock('invoices')
			.hold(HIGH, () => 'moved on')
			.catch(e => {
				isText('closed', 'cannot_connect', { hostport: b.address })(e)
				failures++
			})
		return held === 'moved on'
	})
	assert.ok(failures <= 2, `${failures} failures`)
	assert.deepEqual(
		a.seen.filter(c => c[0] === 'HOLD').map(c => c[2]),
		[HIGH],
	)
})

test('a node dropping its connections: its holder lost, its waiter closed, the map asked for again', async () => {
	const [a, b] = await halves()
	let hold = 0
	// b grants the first HOLD, and lets the second wait.
	b.script = args => (args[0] === 'HOLD' && hold++ === 1 ? '' : undefined)
	const s = await store(a.address)
	const invoices = s.lock('invoices')
	let reason: unknown
	const holding = invoices.hold(HIGH, async lease => {
		await whenLost(lease)
		reason = lease.signal.reason
	})
	await until('held', () => b.count('HOLD') === 1)
	const waiting = invoices.hold(HIGH, () => 1)
	holding.catch(() => {})
	waiting.catch(() => {})
	await until('waiting', () => b.count('HOLD') === 2)
	const before = a.count('CLUSTER SLOTS') + b.count('CLUSTER SLOTS')
	b.drop()
	await assert.rejects(holding, isText('lost', 'lost_connection', { lock: 'invoices', key: JSON.stringify(HIGH) }))
	assert.ok(reason instanceof HoldlineError && reason.kind === 'lost')
	await assert.rejects(waiting, isText('closed', 'connection_closed_key', { lock: 'invoices', key: JSON.stringify(HIGH) }))
	await until('the map asked for again', () => a.count('CLUSTER SLOTS') + b.count('CLUSTER SLOTS') > before)
	// b is back (it only dropped its connections): the next hold is granted there.
	assert.equal(await invoices.hold(HIGH, () => 'again'), 'again')
})

test('a node gone silent under a waiting hold: wait_silent, and the map asked for again', async () => {
	const [a, b] = await halves()
	b.script = args => (args[0] === 'HOLD' ? '' : undefined)
	const s = await store(a.address)
	const before = a.count('CLUSTER SLOTS') + b.count('CLUSTER SLOTS')
	const hold = s.lock('invoices', { ttl: '300ms' }).hold(HIGH, () => 1, { wait: 0 })
	await assert.rejects(hold, isText('closed', 'wait_silent', { lock: 'invoices', key: JSON.stringify(HIGH), wait: '0s', ttl: '1s' }))
	await until('the map asked for again', () => a.count('CLUSTER SLOTS') + b.count('CLUSTER SLOTS') > before)
})

test("several addresses: tried in order, the first that answers wins; none: the last one's cannot_connect", async () => {
	const [alive] = await nodes(1)
	await using dead = await refusedAddress()
	await using deadToo = await refusedAddress()
	for (const address of [`${dead.address},${alive!.address}`, [dead.address, alive!.address]]) {
		const s = await store(address)
		assert.equal(s.address, alive!.address)
		assert.equal(await s.lock('l').hold('k', () => 'held'), 'held')
	}
	await assert.rejects(connect(`${alive!.address.replace(/:\d+$/, ':1')},${dead.address},${deadToo.address}`), isText('closed', 'cannot_connect', { hostport: deadToo.address }))
	await assert.rejects(connect([dead.address, 'not an address']), isText('invalid', 'bad_address', { address: '"not an address"' }))
})

test("the first address's token applies to every node", async () => {
	const [a, b] = await halves()
	const s = await store(`redis://:s3cret@${a.address},${b.address}`)
	await s.lock('l').hold(HIGH, () => undefined)
	assert.deepEqual(
		b.seen.find(c => c[0] === 'HELLO'),
		['HELLO', '3', 'AUTH', 'default', 's3cret'],
	)
	assert.deepEqual(
		a.seen.find(c => c[0] === 'HELLO'),
		['HELLO', '3', 'AUTH', 'default', 's3cret'],
	)
})

/** Three nodes splitting the slots in thirds (the first node's range first), and a key on the third that answers CLUSTERDOWN twice, then is granted. */
async function thirdsOneKeyDownTwice(): Promise<{ a: FakeNode; b: FakeNode; c: FakeNode; key: string }> {
	const [a, b, c] = (await nodes(3)) as [FakeNode, FakeNode, FakeNode]
	const layout = [
		{ start: 0, end: 5460, node: a },
		{ start: 5461, end: 10922, node: b },
		{ start: 10923, end: 16383, node: c },
	]
	for (const node of [a, b, c]) node.layout = layout
	const key = keyIn(10923, 16383)
	let downs = 0
	c.script = args => (args[0] === 'HOLD' && downs++ < 2 ? CLUSTERDOWN : undefined)
	return { a, b, c, key }
}

/**
 * Holds `key` (CLUSTERDOWN twice: the map asked for again twice) and checks
 * the time: one silent node given up after texts.json's
 * map_refresh_node_timeout_ms (the connect timeout is 10 s), then asked
 * last, so not waited for again.
 */
async function holdThroughTwoRefreshes(s: Store, key: string): Promise<void> {
	const rules = TABLE.rules as unknown as Record<string, number>
	const given = rules.map_refresh_node_timeout_ms!
	const pause = rules.cluster_down_pause_ms!
	const began = performance.now()
	assert.equal(await s.lock('frozen').hold(key, lease => lease.key), key)
	const took = performance.now() - began
	assert.ok(took >= given + 2 * pause - 20 && took < given + 1500, `took ${took} ms`)
}

test('a node silent to CLUSTER SLOTS, first in the map, holds up a refresh 2 s at most, then is asked last', async () => {
	const { a, b, key } = await thirdsOneKeyDownTwice()
	// The node connected through, first in the map, with an idle connection.
	const s = await store(a.address)
	a.script = () => '' // answers nothing from now on, HELLO included
	await holdThroughTwoRefreshes(s, key)
	// Asked at connect and by the first refresh (given up); the second asked b first.
	assert.equal(a.count('CLUSTER SLOTS'), 2)
	assert.equal(b.count('CLUSTER SLOTS'), 2)
})

test('a node that answers nothing, first in the map, holds up a refresh 2 s at most, dialling included', async () => {
	const { a, b, key } = await thirdsOneKeyDownTwice()
	// a takes connections and answers nothing, not even HELLO; connected
	// through b, the store has no connection to a before the map is asked for again.
	a.script = () => ''
	const s = await store(b.address)
	await holdThroughTwoRefreshes(s, key)
	assert.equal(a.count('HELLO'), 1)
	assert.equal(a.count('CLUSTER SLOTS'), 0)
	assert.equal(b.count('CLUSTER SLOTS'), 3)
})

/** A `STATS` answer (a RESP3 map) with these counters. */
function statsReply(counters: Record<string, number>): string {
	const pairs = Object.entries(counters).map(([name, n]) => `+${name}\r\n:${n}\r\n`)
	return `%${pairs.length}\r\n${pairs.join('')}`
}

test("stats: every node's counters summed; a node that cannot be reached rejects it cannot_connect; a single node's its own", async () => {
	const [a, b] = await halves()
	a.script = args => (args[0] === 'STATS' ? statsReply({ live_keys: 3, grants: 1, waiters: 2 }) : undefined)
	b.script = args => (args[0] === 'STATS' ? statsReply({ live_keys: 4, grants: 10, timeouts: 7 }) : undefined)
	const s = await store(a.address)
	const stats = await s.stats('tally')
	assert.deepEqual({ ...stats }, { live_keys: 7, grants: 11, waiters: 2, timeouts: 7 })
	assert.deepEqual([a.count('STATS'), b.count('STATS')], [1, 1])
	assert.deepEqual(
		a.seen.find(c => c[0] === 'STATS'),
		['STATS', 'tally'],
	)

	// A node of the map that cannot be reached fails the call, as a hold sent there would.
	const [c] = (await nodes(1)) as [FakeNode]
	await using gone = await refusedAddress()
	c.layout = [
		{ start: 0, end: 8191, node: c },
		{ start: 8192, end: 16383, node: gone },
	]
	c.script = a.script
	const withGone = await store(c.address)
	await assert.rejects(withGone.stats('tally'), isText('closed', 'cannot_connect', { hostport: gone.address }))

	// A single node: its own counters, as ever.
	const [single] = (await nodes(1)) as [FakeNode]
	single.script = args => (args[0] === 'STATS' ? statsReply({ grants: 5 }) : undefined)
	const alone = await store(single.address)
	assert.deepEqual({ ...(await alone.stats('tally')) }, { grants: 5 })
	assert.equal(single.count('STATS'), 1)
})
