/**
 * A planned hand-over against a real cluster (clients/testing/cluster.py:
 * a private etcd, three nodes, 8 partitions, an etcd ttl of 2 s, a max ttl
 * of 2 s): the owner of a held key gets SIGTERM while the holder's
 * function runs. The holder follows its lease to the new owner: the
 * function completes, the hold answers its value, the signal never fires,
 * the fence is the same, the key stays held there (another client's try
 * finds it held) and is free once the hold returns. A waiter waiting then
 * keeps its place: granted after the holder, before a client that began
 * waiting after the hand-over.
 */

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type Lease, type Lock, type Tried } from '../src/index.js'
import type { Reply } from '../src/resp.js'
import { plainCommand, plainInspect, startCluster, type Cluster } from './cluster.js'
import { sleep, until } from './server.js'

/** The cluster's max ttl, and every lock's ttl here. */
const MAX_TTL_MS = 2000
const TTL = { ttl: MAX_TTL_MS }
/** How long the holder's function runs. */
const FUNCTION_MS = 3000

let cluster: Cluster
before(async () => {
	cluster = await startCluster(['--nodes', '3', '--partitions', '8', '--etcd-ttl', '2', '--max-ttl', `${MAX_TTL_MS}ms`])
})
after(async () => {
	await cluster?.stop()
})

/** Nodes SIGTERMed so far: no longer asked. */
const gone = new Set<number>()

/**
 * The node serving `key` now, by its index: a live node's INSPECT answers
 * there or names the owner in MOVED; asked again while it answers
 * CLUSTERDOWN or names a node that left (the partition between owners).
 */
async function ownerOf(lock: string, key: string): Promise<number> {
	let owner = -1
	await until(`the owner of ${key}`, async () => {
		const asked = cluster.nodes.findIndex((_, i) => !gone.has(i))
		const seen = await plainInspect(cluster.nodes[asked]!.addr, lock, key)
		if (typeof seen !== 'string') {
			owner = asked
			return true
		}
		const moved = /^MOVED \d+ (\S+)$/.exec(seen)?.[1]
		owner = cluster.nodes.findIndex(n => n.addr === moved)
		return owner >= 0 && !gone.has(owner)
	})
	return owner
}

/**
 * `tryHold` of `key` by another store, tried again while it fails closed:
 * that store's map still names the node that left, until a failed dial
 * makes it ask again. Answers the fence it got, if any.
 */
async function tryUntilRouted(lock: Lock, key: string): Promise<Tried<bigint>> {
	for (let tries = 0; ; tries++) {
		try {
			return await lock.tryHold(key, lease => lease.fence)
		} catch (e) {
			if (!(e instanceof HoldlineError && e.kind === 'closed') || tries >= 20) throw e
			await sleep(50)
		}
	}
}

/**
 * INSPECT at node `i` once the key has a holder there (a lease handed over
 * is held for its holder before it re-attaches, with no holder listed), or
 * the last answer after the max ttl.
 */
async function attachedAt(i: number, lock: string, key: string): Promise<Map<string, Reply> | string | null> {
	let seen: Map<string, Reply> | string | null = null
	await until(
		`a holder of ${key} at node ${i}`,
		async () => {
			seen = await plainInspect(cluster.nodes[i]!.addr, lock, key)
			return seen instanceof Map && seen.get('holder') instanceof Map
		},
		MAX_TTL_MS,
	).catch(() => {})
	return seen
}

/** Whether node `i` still answers (a node that handed over and exited refuses the dial). */
async function answers(i: number): Promise<boolean> {
	return plainCommand(cluster.nodes[i]!.addr, ['PING']).then(
		() => true,
		() => false,
	)
}

/** SIGTERMs node `i` and waits until it no longer answers: it handed its partitions over and exited. */
async function terminate(i: number): Promise<void> {
	gone.add(i)
	cluster.terminate(i)
	await until(`node ${i} gone after SIGTERM`, async () => !(await answers(i)), 10_000)
}

test('SIGTERM of the owner while a holder runs: the lease follows to the new owner, same fence, no signal, still held there, free once the hold returns', async t => {
	await using holder = await connect(cluster.nodes.map(n => n.addr))
	await using other = await connect(cluster.nodes.map(n => n.addr))
	// A hash tag: a fenced row of the key's slot (`${key}:row`) goes to the same node.
	const key = `{${cluster.keyOn(0, 'follow-')}}`
	const victim = await ownerOf('handover', key)
	const lock = holder.lock('handover', TTL)
	const otherLock = other.lock('handover', TTL)
	let signalFired = false
	let fenceBefore = 0n
	let fenceAfter = 0n
	let heldAfterHandover: boolean | undefined
	let newOwner = -1
	let inspectedFence: unknown
	let keyFence: unknown
	let putAfter = ''
	const started = performance.now()
	const value = await lock.hold(key, async (lease: Lease) => {
		lease.signal.addEventListener('abort', () => (signalFired = true), { once: true })
		fenceBefore = lease.fence
		await terminate(victim)
		newOwner = await ownerOf('handover', key)
		// Held at the new owner, by this lease: another client's try finds it held.
		heldAfterHandover = !(await tryUntilRouted(otherLock, key)).acquired
		// Re-attached there within the lease's ttl: its holder is this lease's connection, with its fence.
		const seen = await attachedAt(newOwner, 'handover', key)
		const holderSeen = seen instanceof Map ? seen.get('holder') : undefined
		inspectedFence = holderSeen instanceof Map ? holderSeen.get('fence') : seen
		keyFence = seen instanceof Map ? seen.get('fence') : undefined
		// A fenced write under the lease's fence, now on the new owner.
		putAfter = await holder.put('handover', key, lease.fence, `${key}:row`, 'after').then(
			() => 'OK',
			(e: unknown) => (e instanceof Error ? e.message : String(e)),
		)
		// Run on, past the lease's ttl: only renewals on the new owner keep it.
		await sleep(Math.max(0, FUNCTION_MS - (performance.now() - started)))
		fenceAfter = lease.fence
		assert.equal(lease.lost, false, 'not lost while the function ran')
		return 'done'
	})
	const took = performance.now() - started
	assert.equal(value, 'done', 'the hold answers the function value')
	assert.equal(signalFired, false, 'the signal never fired')
	assert.equal(fenceAfter, fenceBefore, 'the fence is unchanged')
	assert.notEqual(newOwner, victim, 'another node serves the key now')
	assert.equal(heldAfterHandover, true, 'held at the new owner while the function ran')
	assert.equal(inspectedFence, fenceBefore, "the new owner's holder has the same fence")
	t.diagnostic(`INSPECT at the new owner: the key's fence ${String(keyFence)}, its holder's ${String(inspectedFence)}`)
	// Let go on the new owner: another client takes it at once.
	const tried = await tryUntilRouted(otherLock, key)
	assert.ok(tried.acquired, 'free at once after the hold returned')
	assert.ok(tried.value > fenceBefore, `fence ${tried.value} after ${fenceBefore}`)
	t.diagnostic(`hold of ${Math.round(took)} ms; node ${victim} SIGTERMed, node ${newOwner} took the lease`)
	// A fenced write is accepted while the key is held by the lease bearing that fence.
	assert.equal(putAfter, 'OK', 'a fenced PUT under the same fence, on the new owner')
})

test('SIGTERM of the owner while a waiter waits: it keeps its place, granted after the holder and before a later waiter', async () => {
	await using holder = await connect(cluster.nodes.filter((_, i) => !gone.has(i)).map(n => n.addr))
	await using early = await connect(cluster.nodes.filter((_, i) => !gone.has(i)).map(n => n.addr))
	// A key of a node still up, that hands over to one still up.
	const key = 'line-0'
	const victim = await ownerOf('line', key)
	const order: string[] = []
	const fences = new Map<string, bigint>()
	const taken = (who: string) => (lease: Lease) => {
		order.push(who)
		fences.set(who, lease.fence)
	}
	let releaseHolder!: () => void
	const holderDone = new Promise<void>(resolve => (releaseHolder = resolve))
	let holderSignal = false
	const holding = holder.lock('line', TTL).hold(key, async lease => {
		lease.signal.addEventListener('abort', () => (holderSignal = true), { once: true })
		taken('holder')(lease)
		await holderDone
		assert.equal(lease.lost, false)
	})
	// Awaited at the end; a failure meanwhile is no unhandled rejection.
	holding.catch(() => {})
	await until('the holder granted', () => order.length === 1)
	const earlyWaiting = early.lock('line', TTL).hold(key, taken('early'), { wait: '20s' })
	earlyWaiting.catch(() => {})
	await until('the early waiter in line', async () => {
		const seen = await plainInspect(cluster.nodes[victim]!.addr, 'line', key)
		return seen instanceof Map && seen.get('waiters') === 1n
	})
	await terminate(victim)
	const newOwner = await ownerOf('line', key)
	// In line at the new owner, in its place: one waiter there before the late one comes.
	await until('the early waiter re-attached at the new owner', async () => {
		const seen = await plainInspect(cluster.nodes[newOwner]!.addr, 'line', key)
		return seen instanceof Map && seen.get('waiters') === 1n
	})
	// Connected after the hand-over: its map names the new owner.
	await using late = await connect(cluster.nodes.filter((_, i) => !gone.has(i)).map(n => n.addr))
	const lateWaiting = late.lock('line', TTL).hold(key, taken('late'), { wait: '20s' })
	lateWaiting.catch(() => {})
	await until('the late waiter in line', async () => {
		const seen = await plainInspect(cluster.nodes[newOwner]!.addr, 'line', key)
		return seen instanceof Map && seen.get('waiters') === 2n
	})
	releaseHolder()
	await holding
	await earlyWaiting
	await lateWaiting
	assert.equal(holderSignal, false, "the holder's signal never fired")
	assert.deepEqual(order, ['holder', 'early', 'late'], 'the early waiter kept its place')
	assert.ok(fences.get('early')! > fences.get('holder')! && fences.get('late')! > fences.get('early')!, `fences ${[...fences].join(' ')}`)
})
