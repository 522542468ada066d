/**
 * Against a real cluster (clients/testing/cluster.py: a private etcd, three
 * nodes, 8 partitions, an etcd ttl of 2 s, a max ttl of 2 s), one for the
 * whole file: holds through one address and through all land on their
 * owners, a stale map is mended by the nodes' MOVED, fenced writes with hash
 * tags, a ttl above the cluster's max refused, and last, since it kills a
 * node, failover: the holder lost, the waiter closed, the key granted again
 * by the new owner (once its take-over wait, the max ttl, is over) with a
 * greater fence, and an observer of the key following it to the new owner. The short max ttl keeps that wait short; every lock here
 * asks a ttl of at most it (a longer one is refused).
 */

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type Leader, type Lease, type Store } from '../src/index.js'
import { RespError } from '../src/resp.js'
import { slotOf } from '../src/slots.js'
import { plainCommand, plainInspect, startCluster, type Cluster } from './cluster.js'
import { fakeNode, slotsReply } from './fakenode.js'
import { startServer, until, whenLost } from './server.js'
import { isText } from './texts.js'

const ETCD_TTL_MS = 2000
/** The cluster's max ttl, and every lock's ttl here. */
const MAX_TTL_MS = 2000
const TTL = { ttl: MAX_TTL_MS }

let cluster: Cluster
before(async () => {
	cluster = await startCluster(['--nodes', '3', '--partitions', '8', '--etcd-ttl', '2', '--max-ttl', `${MAX_TTL_MS}ms`])
})
after(async () => {
	await cluster?.stop()
})

const addrs = () => cluster.nodes.map(n => n.addr)

/**
 * Holds a key of each node through `store`, and while holding looks at the
 * owner on a plain connection: held there, with the lease's fence; another
 * node answers MOVED to the owner.
 */
async function holdOnEveryNode(store: Store, lock: string, prefix: string): Promise<void> {
	for (const [i, node] of cluster.nodes.entries()) {
		const key = cluster.keyOn(i, prefix)
		await store.lock(lock, TTL).hold(key, async (lease: Lease) => {
			const seen = await plainInspect(node.addr, lock, key)
			assert.ok(seen instanceof Map, `node ${i} knows nothing of ${key}: ${String(seen)}`)
			assert.equal(seen.get('held'), true, `held on node ${i}`)
			assert.equal(seen.get('fence'), lease.fence)
			const other = cluster.nodes[(i + 1) % cluster.nodes.length]!
			assert.equal(await plainInspect(other.addr, lock, key), `MOVED ${slotOf(key)} ${node.addr}`)
		})
	}
}

test('through one address: the map learned at connect, a key of every node held on its owner', async () => {
	await using store = await connect(cluster.nodes[0]!.addr)
	assert.equal(store.clustered, true)
	await holdOnEveryNode(store, 'one', 'one-')
	assert.equal(store.redirects, 0, 'no MOVED: the map was right')
	// tryHold and inspect go to the owner too.
	const key = cluster.keyOn(2, 'try-')
	const tried = await store.lock('one', TTL).tryHold(key, async () => (await store.lock('one', TTL).inspect(key))?.held)
	assert.deepEqual(tried, { acquired: true, value: true })
	assert.equal(store.redirects, 0)
})

test('through every address, as a list and as one text: the same', async () => {
	for (const address of [addrs(), addrs().join(',')]) {
		await using store = await connect(address)
		assert.equal(store.address, cluster.nodes[0]!.addr)
		await holdOnEveryNode(store, 'all', 'all-')
		assert.equal(store.redirects, 0)
	}
})

test("the client's slots are the nodes' (CLUSTER KEYSLOT)", async () => {
	const keys = ['123456789', 'foo', '{user1000}.following', 'foo{}{bar}', 'foo{{bar}}zap', 'é', '{inv-7}:status', ...cluster.nodes.map((_, i) => cluster.keyOn(i))]
	for (const key of keys) assert.equal(await plainCommand(cluster.nodes[1]!.addr, ['CLUSTER', 'KEYSLOT', key]), BigInt(slotOf(key)), key)
})

test('a stale map (every slot on node 0): the nodes answer MOVED, the client follows it and then asks for the map', async () => {
	// A seed that answers HELLO and, once, a map with node 0 serving every slot; then nothing.
	const seed = await fakeNode()
	const stale = slotsReply([{ start: 0, end: 16383, node: { port: Number(cluster.nodes[0]!.addr.split(':')[1]) } }])
	let asked = 0
	seed.script = args => (args[0] === 'CLUSTER' ? (asked++ === 0 ? stale : null) : undefined)
	try {
		await using store = await connect(seed.address)
		await holdOnEveryNode(store, 'stale', 'stale-')
		assert.ok(store.redirects >= 1, `${store.redirects} MOVED followed`)
		// The map asked for again (the fake node connected through hangs up on
		// CLUSTER from now on, node 0 answers): no more MOVED.
		let n = 0
		await until('the map mended', async () => {
			const before = store.redirects
			await store.lock('stale', TTL).hold(cluster.keyOn(1, `again${n++}-`), () => undefined)
			return store.redirects === before
		})
		const settled = store.redirects
		await holdOnEveryNode(store, 'stale', 'after-')
		assert.equal(store.redirects, settled)
	} finally {
		seed.close()
	}
})

test("fenced writes with hash tags go to the key's node; a row of another slot is CROSSSLOT", async () => {
	await using store = await connect(cluster.nodes[0]!.addr)
	const invoices = store.lock('invoices', TTL)
	for (const [i] of cluster.nodes.entries()) {
		const tag = `{${cluster.keyOn(i, 'inv-')}}`
		await invoices.hold(tag, lease => store.put('invoices', tag, lease.fence, `${tag}:status`, `paid ${i}`))
		assert.equal(await store.get(`${tag}:status`), `paid ${i}`)
	}
	const tag = `{${cluster.keyOn(0, 'inv-')}}`
	const other = `{${cluster.keyOn(1, 'inv-')}}:status`
	await invoices.hold(tag, async lease => {
		await assert.rejects(store.put('invoices', tag, lease.fence, other, 'x'), (e: unknown) => {
			assert.ok(e instanceof HoldlineError && e.kind === 'invalid', String(e))
			assert.equal(e.message, "CROSSSLOT Keys in request don't hash to the same slot")
			return true
		})
	})
	assert.equal(store.redirects, 0)
})

test('a single server (no --etcd): CLUSTER SLOTS refused, the client in single-node mode, nothing else changed', async () => {
	const single = await startServer()
	try {
		const refused = await plainCommand(single.address, ['CLUSTER', 'SLOTS'])
		assert.deepEqual(refused, new RespError('ERR', 'This instance has cluster support disabled'))
		await using store = await connect(single.address)
		assert.equal(store.clustered, false)
		for (const key of cluster.nodes.map((_, i) => cluster.keyOn(i))) assert.equal(await store.lock('single').hold(key, lease => lease.key), key)
		assert.equal(store.redirects, 0)
	} finally {
		await single.stop()
	}
})

test("a ttl above the cluster's max ttl: holds and tries refused invalid, with the node's text", async () => {
	await using store = await connect(cluster.nodes[0]!.addr)
	const key = cluster.keyOn(1, 'long-')
	const long = store.lock('long', { ttl: '4s' })
	const refused = (e: unknown) => {
		assert.ok(e instanceof HoldlineError && e.kind === 'invalid', String(e))
		assert.equal(e.message, `lock long: key "${key}": ttl 4s is above the cluster's max ttl (2s): invalid`)
		return true
	}
	await assert.rejects(
		long.hold(key, () => 'held'),
		refused,
	)
	await assert.rejects(
		long.tryHold(key, () => 'held'),
		refused,
	)
	assert.deepEqual(await store.lock('long', TTL).tryHold(key, () => 'held'), { acquired: true, value: 'held' })
})

test("failover: kill -9 of a key's owner loses its holder, fails its waiter closed, and the new owner grants it with a greater fence; an observer of the key follows it there", async t => {
	// Node 0: the address connect reached, also where a slot missing from the map goes.
	await using store = await connect(addrs())
	const victim = cluster.nodes[0]!
	const key = cluster.keyOn(0, 'failover-')
	const lock = store.lock('failover', TTL)
	let firstFence = 0n
	let lostAt = 0
	const holding = lock.hold(key, async lease => {
		firstFence = lease.fence
		await whenLost(lease)
		lostAt = performance.now()
		throw lease.signal.reason
	})
	const waiting = lock.hold(key, () => 'granted', { wait: '60s' })
	holding.catch(() => {})
	waiting.catch(() => {})
	await until('one waiter', async () => {
		const seen = await plainInspect(victim.addr, 'failover', key)
		return seen instanceof Map && seen.get('waiters') === 1n
	})
	// An observer of the key (an election's observe works on any key): the holder first.
	const observed: Array<Leader | null> = []
	const stopObserving = new AbortController()
	const observing = (async () => {
		for await (const leader of lock.election(key).observe({ signal: stopObserving.signal })) observed.push(leader)
	})()
	await until('the holder observed', () => observed.length > 0)
	assert.deepEqual(observed.slice(), [{ note: '', fence: firstFence, heldForMs: null }])
	const killedAt = performance.now()
	cluster.kill(0)
	await assert.rejects(holding, isText('lost', 'lost_connection', { lock: 'failover', key: JSON.stringify(key) }))
	assert.ok(lostAt - killedAt < ETCD_TTL_MS + 3000, `lost ${lostAt - killedAt} ms after the kill`)
	await assert.rejects(waiting, isText('closed', 'connection_closed_key', { lock: 'failover', key: JSON.stringify(key) }))
	// Retried while it fails closed (the dead node, CLUSTERDOWN) or in use (the new owner, having
	// taken the partition over without a hand-over, grants nothing for the max ttl), it is granted
	// by the new owner.
	const failures: string[] = []
	let fence = 0n
	await until(
		'the key granted again',
		async () => {
			const granted = await lock
				.hold(key, lease => lease.fence, { wait: '500ms' })
				.catch((e: unknown) => {
					assert.ok(e instanceof HoldlineError && (e.kind === 'closed' || e.kind === 'in use'), `failed ${String(e)}`)
					failures.push(e.message)
					return undefined
				})
			fence = granted ?? 0n
			return granted !== undefined
		},
		ETCD_TTL_MS + MAX_TTL_MS + 4000,
	)
	const grantedAt = performance.now()
	assert.ok(fence > firstFence, `fence ${fence} after ${firstFence}`)
	// A store connecting now: the dead first address tried, the next one wins.
	await using later = await connect(addrs())
	assert.equal(later.address, cluster.nodes[1]!.addr)
	const again = await later.lock('failover', TTL).hold(key, lease => lease.fence)
	assert.ok(again > fence, `fence ${again} after ${fence}`)
	// The observer connected again, to the new owner: it saw both grants there, in fence order.
	await until('both grants observed', () => observed.some(l => l?.fence === again), 5000)
	stopObserving.abort()
	await observing
	const fences = observed.flatMap(l => (l === null ? [] : [l.fence]))
	assert.deepEqual(
		fences,
		[...fences].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)),
		'in fence order',
	)
	assert.ok(fences.includes(fence) && fences.includes(again), `observed ${fences.join(' ')}`)
	assert.ok(observed.indexOf(null) > 0, 'none led for a while after the holder: the key free at the new owner, or a grant there ended')
	const tally = new Map<string, number>()
	for (const text of failures) tally.set(text, (tally.get(text) ?? 0) + 1)
	t.diagnostic(`failover: lost after ${Math.round(lostAt - killedAt)} ms, granted again after ${Math.round(grantedAt - killedAt)} ms; failures meanwhile: ${JSON.stringify([...tally])}`)
})
