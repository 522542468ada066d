/**
 * Permits against a real server: a semaphore, a read-write lock (readers
 * share, a writer is alone and never overtaken), tryHold, the server's
 * texts for counts that do not fit, inspect's holders, and permits handed
 * back by a closed connection. Against a scripted node: the words sent.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type HoldOptions, type Lease, type Lock } from '../src/index.js'
import { closedAfterEach, fakeNode } from './fakenode.js'
import { gate, sharedServer, until, whenLost } from './server.js'

const shared = sharedServer()
const closeAfterTest = closedAfterEach()

/** A hold of `key` kept until `letGo()`; `granted` resolves with its lease. */
interface Holding {
	granted: Promise<Lease>
	/** Whether its function has run: the server granted it. */
	readonly isGranted: boolean
	/** What `hold` answered: resolves once the key is let go. */
	done: Promise<void>
	letGo(): Promise<void>
}

function holding(lock: Lock, key: string, options: HoldOptions = {}): Holding {
	const release = gate()
	const granted = gate<Lease>()
	let isGranted = false
	const done = lock.hold(
		key,
		async lease => {
			isGranted = true
			granted.open(lease)
			await release.opened
		},
		{ wait: '30s', ...options },
	)
	// A hold that fails is asserted through `done`, never an unhandled rejection.
	done.catch(() => {})
	return {
		granted: granted.opened,
		get isGranted() {
			return isGranted
		},
		done,
		async letGo() {
			release.open()
			await done
		},
	}
}

/** The key's line, as the server counts it. */
async function waiters(lock: Lock, key: string): Promise<number> {
	return (await lock.inspect(key))?.waiters ?? 0
}

/** Matches the server's `invalid` error with exactly `text`. */
const invalid = (text: string) => (e: unknown) => {
	assert.ok(e instanceof HoldlineError, String(e))
	assert.equal(e.kind, 'invalid')
	assert.equal(e.message, text)
	return true
}

test('a semaphore of 3: three hold the key at once, a fourth waits until one lets go; fences strictly rise', async () => {
	const lock = shared.store.lock('sem3', { permits: 3 })
	assert.equal(lock.permits, 3)
	const holds: Holding[] = []
	const leases: Lease[] = []
	for (let i = 0; i < 3; i++) {
		// Each granted while the earlier ones still hold: three at once.
		holds.push(holding(lock, 'k'))
		leases.push(await holds[i]!.granted)
	}
	assert.deepEqual(
		leases.map(l => l.permits),
		[1, 1, 1],
	)
	const full = await lock.inspect('k')
	assert.equal(full?.holders, 3)
	assert.equal(full?.permitsHeld, 3)

	const fourth = holding(lock, 'k')
	await until('the fourth in line', async () => (await waiters(lock, 'k')) === 1)
	assert.equal(fourth.isGranted, false)
	await holds[1]!.letGo()
	const last = await fourth.granted
	const fences = [...leases, last].map(l => l.fence)
	for (let i = 1; i < fences.length; i++) assert.ok(fences[i - 1]! < fences[i]!, `fences in grant order: ${fences}`)
	const after = await lock.inspect('k')
	assert.equal(after?.holders, 3)
	assert.equal(after?.waiters, 0)
	await Promise.all([holds[0]!, holds[2]!, fourth].map(h => h.letGo()))
})

test('read-write: readers share; a writer waits for them; readers after a waiting writer wait behind it, and are granted together when it lets go', async () => {
	const docs = shared.store.lock('rw', { permits: 1024 })
	const r1 = holding(docs, 'd')
	const r2 = holding(docs, 'd')
	const [l1, l2] = await Promise.all([r1.granted, r2.granted])
	assert.equal((await docs.inspect('d'))?.holders, 2)

	const writer = holding(docs, 'd', { exclusive: true })
	await until('the writer in line', async () => (await waiters(docs, 'd')) === 1)
	const r3 = holding(docs, 'd')
	const r4 = holding(docs, 'd')
	await until('two readers behind the writer', async () => (await waiters(docs, 'd')) === 3)
	// Their one permit each would fit beside the first readers: they wait all the same.
	const before = await docs.inspect('d')
	assert.deepEqual([before?.holders, before?.permitsHeld], [2, 2])
	assert.deepEqual([writer.isGranted, r3.isGranted, r4.isGranted], [false, false, false])

	await r1.letGo()
	const one = await docs.inspect('d')
	assert.deepEqual([one?.holders, one?.waiters, writer.isGranted], [1, 3, false])
	await r2.letGo()
	const w = await writer.granted
	assert.equal(w.permits, 1024)
	assert.ok(w.fence > l1.fence && w.fence > l2.fence)
	const alone = await docs.inspect('d')
	assert.deepEqual([alone?.holders, alone?.permitsHeld, alone?.waiters], [1, 1024, 2])
	assert.deepEqual([r3.isGranted, r4.isGranted], [false, false])

	await writer.letGo()
	// Both granted while neither has let go: the writer's release granted them together.
	const [l3, l4] = await Promise.all([r3.granted, r4.granted])
	assert.ok(l3.fence > w.fence && l4.fence > w.fence && l3.fence !== l4.fence)
	const shared2 = await docs.inspect('d')
	assert.deepEqual([shared2?.holders, shared2?.permitsHeld, shared2?.waiters], [2, 2, 0])
	await Promise.all([r3.letGo(), r4.letGo()])
})

test('tryHold is granted only when its permits fit and nobody waits', async () => {
	const lock = shared.store.lock('try2', { permits: 2 })
	assert.deepEqual(await lock.tryHold('t', l => l.permits, { exclusive: true }), { acquired: true, value: 2 })
	const one = holding(lock, 't')
	await one.granted
	// One of two held: one more fits, two do not.
	assert.deepEqual(await lock.tryHold('t', l => l.permits), { acquired: true, value: 1 })
	let ran = false
	assert.deepEqual(await lock.tryHold('t', () => (ran = true), { permits: 2 }), { acquired: false })
	assert.deepEqual(await lock.tryHold('t', () => (ran = true), { exclusive: true }), { acquired: false })
	const writer = holding(lock, 't', { exclusive: true })
	await until('the writer in line', async () => (await waiters(lock, 't')) === 1)
	// One permit is free, but the writer waits before it.
	assert.deepEqual(await lock.tryHold('t', () => (ran = true)), { acquired: false })
	assert.equal(ran, false)
	await one.letGo()
	assert.equal((await writer.granted).permits, 2)
	await writer.letGo()
	assert.deepEqual(await lock.tryHold('t', l => l.permits, { permits: 2 }), { acquired: true, value: 2 })
})

test("the server's texts: another count while the lock is known, more permits than the lock's, a count of 0; both permits and exclusive a TypeError", async () => {
	const docs = shared.store.lock('docs', { permits: 1024 })
	const reader = holding(docs, 'd')
	await reader.granted
	let ran = false
	const run = () => (ran = true)
	await assert.rejects(shared.store.lock('docs', { permits: 8 }).hold('d', run), invalid('lock docs: opened with 1024 permits, not 8: invalid'))
	// The count belongs to the lock: any key, tryHold too, and a plain handle (1 permit) as well.
	await assert.rejects(shared.store.lock('docs', { permits: 8 }).tryHold('other', run), invalid('lock docs: opened with 1024 permits, not 8: invalid'))
	await assert.rejects(shared.store.lock('docs').hold('d', run), invalid('lock docs: opened with 1024 permits, not 1: invalid'))
	await reader.letGo()

	const providers = shared.store.lock('providers', { permits: 5 })
	await assert.rejects(providers.hold('stripe', run, { permits: 6 }), invalid('lock providers: key "stripe": 6 permits asked of a lock of 5: invalid'))
	await assert.rejects(providers.tryHold('stripe', run, { permits: 6 }), invalid('lock providers: key "stripe": 6 permits asked of a lock of 5: invalid'))
	await assert.rejects(providers.hold('stripe', run, { permits: 0 }), invalid('lock providers: key "stripe": 0 permits asked of a lock of 5: invalid'))
	await assert.rejects(shared.store.lock('none', { permits: 0 }).hold('k', run), invalid('lock none: a lock has 1 to 1000000 permits, not 0: invalid'))
	await assert.rejects(shared.store.lock('none', { permits: 0 }).tryHold('k', run), invalid('lock none: a lock has 1 to 1000000 permits, not 0: invalid'))
	await assert.rejects(shared.store.lock('many', { permits: 1_000_001 }).hold('k', run), invalid('lock many: a lock has 1 to 1000000 permits, not 1000001: invalid'))

	const both = (e: unknown) => {
		assert.ok(e instanceof TypeError, String(e))
		assert.equal(e.message, 'lock providers: key "stripe": both permits (2) and exclusive given: a hold takes some permits or all 5, not both')
		return true
	}
	await assert.rejects(providers.hold('stripe', run, { permits: 2, exclusive: true }), both)
	await assert.rejects(providers.tryHold('stripe', run, { permits: 2, exclusive: true }), both)
	assert.equal(ran, false)
	// Exclusive on a plain lock is a plain hold.
	assert.equal(await shared.store.lock('plain').hold('k', l => l.permits, { exclusive: true }), 1)
})

test('inspect shows the holders, the permits held, and each holder with its fence and permits, oldest first', async () => {
	const lock = shared.store.lock('seen', { permits: 5 })
	const other = closeAfterTest(await connect(shared.server.address))
	const a = holding(lock, 'k', { permits: 2 })
	const la = await a.granted
	const b = holding(other.lock('seen', { permits: 5 }), 'k')
	const lb = await b.granted
	const writer = holding(lock, 'k', { exclusive: true })
	await until('the writer in line', async () => (await waiters(lock, 'k')) === 1)

	const state = await lock.inspect('k')
	assert.ok(state)
	assert.deepEqual([state.held, state.holders, state.permitsHeld, state.waiters], [true, 2, 3, 1])
	assert.equal(state.fence, lb.fence, 'the highest fence among the holders')
	const seen = (l: Lease, permits: number) => ({ lease: Number(l.id), fence: l.fence, permits })
	assert.deepEqual(
		state.holderList.map(h => ({ lease: h.lease, fence: h.fence, permits: h.permits })),
		[seen(la, 2), seen(lb, 1)],
	)
	assert.deepEqual(state.holder, state.holderList[0])
	for (const h of state.holderList) {
		assert.equal(h.name, null)
		assert.match(h.addr, /^127\.0\.0\.1:\d+$/)
	}
	assert.notEqual(state.holderList[0]!.id, state.holderList[1]!.id, 'each lease has a connection of its own')

	await a.letGo()
	const left = await lock.inspect('k')
	assert.deepEqual([left?.holders, left?.permitsHeld, left?.holder?.fence, left?.holderList.length], [1, 1, lb.fence, 1])
	await b.letGo()
	const w = await writer.granted
	const alone = await lock.inspect('k')
	assert.deepEqual(
		alone?.holderList.map(h => ({ lease: h.lease, fence: h.fence, permits: h.permits })),
		[seen(w, 5)],
	)
	assert.deepEqual([alone?.holders, alone?.permitsHeld, alone?.waiters], [1, 5, 0])
	await writer.letGo()
	const free = await lock.inspect('k')
	assert.deepEqual(
		{ ...free, heldForMs: undefined, leaseLeftMs: undefined },
		{ held: false, fence: w.fence, heldForMs: undefined, leaseLeftMs: undefined, waiters: 0, holder: null, holders: 0, permitsHeld: 0, holderList: [] },
	)
})

test('a closed connection gives its permits back to the line', async () => {
	const lock = shared.store.lock('returned', { permits: 3 })
	const other = closeAfterTest(await connect(shared.server.address))
	const theirs = other.lock('returned', { permits: 3 })
	const granted = [gate(), gate()]
	// Both hold until their leases are lost: all three permits of `k`.
	const held = [1, 2].map((permits, i) =>
		theirs.hold(
			'k',
			async lease => {
				granted[i]!.open()
				await whenLost(lease)
			},
			{ permits },
		),
	)
	await Promise.all(granted.map(g => g.opened))
	const mine = holding(lock, 'k', { permits: 2 })
	await until('mine in line', async () => (await waiters(lock, 'k')) === 1)
	assert.equal(mine.isGranted, false)

	await other.close()
	for (const hold of held) {
		await assert.rejects(hold, (e: unknown) => e instanceof HoldlineError && e.kind === 'lost' && e.message === 'lock returned: key "k": the lease was lost: its store closed')
	}
	const lease = await mine.granted
	assert.equal(lease.permits, 2)
	const state = await lock.inspect('k')
	assert.deepEqual([state?.holders, state?.permitsHeld, state?.holder?.lease], [1, 2, Number(lease.id)])
	await mine.letGo()
})

test('the words sent: PERMITS only for a count other than 1, TAKE only for a take other than 1, TAKE ALL for exclusive', async () => {
	const node = closeAfterTest(await fakeNode())
	const store = closeAfterTest(await connect(node.address))
	const plain = store.lock('plain')
	const five = store.lock('five', { permits: 5 })
	await plain.hold('k', () => {})
	await plain.hold('k', () => {}, { exclusive: true })
	await plain.tryHold('k', () => {}, { permits: 1 })
	await five.hold('k', () => {}, { wait: 0 })
	await five.hold('k', () => {}, { permits: 2, wait: 0 })
	await five.tryHold('k', () => {}, { exclusive: true })
	const asked = node.seen.filter(args => args[0] === 'HOLD' || args[0] === 'TRYHOLD').map(args => args.join(' '))
	assert.deepEqual(asked, [
		'HOLD plain k WAIT 10000 TTL 10000',
		'HOLD plain k WAIT 10000 TTL 10000 TAKE ALL',
		'TRYHOLD plain k TTL 10000',
		'HOLD five k WAIT 0 TTL 10000 PERMITS 5',
		'HOLD five k WAIT 0 TTL 10000 PERMITS 5 TAKE 2',
		'TRYHOLD five k TTL 10000 PERMITS 5 TAKE ALL',
	])
})
