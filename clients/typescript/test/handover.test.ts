/**
 * A planned hand-over against scripted nodes: a secret sent only to a node
 * that says `handover` in HELLO; a held lease told it moved (a `moved`
 * push, even in the read of its grant; a RENEW or a RELEASE answered
 * MOVED) re-attaches on the node named, keeps its fence, is renewed and
 * let go there, and its signal never fires; a re-attach refused or
 * unanswered loses it (`reattach_failed`); a waiting HOLD answered MOVED
 * re-attaches with its secret and is granted there.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, type Store } from '../src/index.js'
import { slotOf } from '../src/slots.js'
import { closedAfterEach, delayed, fakeNode, HELLO_HANDOVER, keyIn, type FakeNode } from './fakenode.js'
import { sleep, whenLost } from './server.js'
import { isText, tableText } from './texts.js'

const closeAfterTest = closedAfterEach()

const KEY = keyIn(0, 16383, 'ho-')
const SLOT = slotOf(KEY)
const TTL_MS = 900

/** Node `a` serving every slot and `b` to take them over, both able to hand over unless told. */
async function twoNodes(handover = true): Promise<[FakeNode, FakeNode]> {
	const a = closeAfterTest(await fakeNode())
	const b = closeAfterTest(await fakeNode())
	for (const n of [a, b]) {
		if (handover) n.hello = HELLO_HANDOVER
		n.layout = [{ start: 0, end: 16383, node: a }]
	}
	return [a, b]
}

/** `a` gives every slot to `b`, and both say so from now on. */
function handOver(a: FakeNode, b: FakeNode): void {
	a.layout = [{ start: 0, end: 16383, node: b }]
	b.layout = a.layout
}

async function store(address: string): Promise<Store> {
	return closeAfterTest(await connect(address))
}

const grant = (id: number, fence: number) => `*2\r\n:${id}\r\n:${fence}\r\n`
const movedPush = (id: number, to: FakeNode) => `>4\r\n+moved\r\n:${id}\r\n:${SLOT}\r\n+${to.address}\r\n`
const moved = (to: FakeNode) => `-MOVED ${SLOT} ${to.address}\r\n`
const CLUSTERDOWN = '-CLUSTERDOWN Hash slot not served\r\n'
const NOTHING_HANDED_OVER = `-LOST lock ho: key "${KEY}": the lease was lost: nothing was handed over under its secret\r\n`

/** The secret a command carried (`... SECRET s`), or undefined. */
function secretOf(args: string[] | undefined): string | undefined {
	const at = args?.indexOf('SECRET') ?? -1
	return at < 0 ? undefined : args![at + 1]
}

const commands = (node: FakeNode, name: string) => node.seen.filter(args => args[0] === name)

/** Holds KEY for `ms`, answering what the function saw of its lease. */
function holdFor(s: Store, ms: number) {
	return s.lock('ho', { ttl: TTL_MS }).hold(KEY, async lease => {
		const fence = lease.fence
		await sleep(ms)
		return { fence, sameFence: lease.fence === fence, aborted: lease.signal.aborted, lost: lease.lost }
	})
}

test('a secret (32 hex digits, new for each hold) only to a node that says handover in HELLO', async () => {
	const [plain] = await twoNodes(false)
	const s1 = await store(plain.address)
	await s1.lock('ho').hold(KEY, () => undefined)
	await s1.lock('ho').tryHold(KEY, () => undefined)
	assert.deepEqual(plain.seen.filter(args => args[0] === 'HOLD' || args[0] === 'TRYHOLD').map(secretOf), [undefined, undefined])
	const [able] = await twoNodes()
	const s2 = await store(able.address)
	await s2.lock('ho').hold(KEY, () => undefined)
	await s2.lock('ho').hold(KEY, () => undefined)
	await s2.lock('ho').tryHold(KEY, () => undefined)
	const secrets = able.seen.filter(args => args[0] === 'HOLD' || args[0] === 'TRYHOLD').map(secretOf)
	assert.equal(secrets.length, 3)
	for (const secret of secrets) assert.match(secret ?? '', /^[0-9a-f]{32}$/)
	assert.equal(new Set(secrets).size, 3, 'a new secret for each hold')
})

test('a moved push read with the grant: the lease re-attaches on the new node, keeps its fence, is renewed and let go there; its signal never fires', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] === 'HOLD') {
			handOver(a, b)
			return grant(7, 42) + movedPush(7, b)
		}
		return args[0] === 'RENEW' || args[0] === 'RELEASE' ? moved(b) : undefined
	}
	b.script = args => (args[0] === 'REATTACH' ? grant(99, 42) : undefined)
	const s = await store(a.address)
	// Longer than the ttl: only renewals on the new node keep it.
	const seen = await holdFor(s, 2 * TTL_MS)
	assert.deepEqual(seen, { fence: 42n, sameFence: true, aborted: false, lost: false })
	const secret = secretOf(commands(a, 'HOLD')[0])
	assert.deepEqual(commands(b, 'REATTACH'), [['REATTACH', 'ho', KEY, secret]])
	assert.ok(commands(b, 'RENEW').length >= 2, `renewed on the new node: ${JSON.stringify(b.seen)}`)
	assert.ok(
		commands(b, 'RENEW').every(args => args[1] === '99'),
		'under its new id',
	)
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '99']])
	assert.deepEqual(commands(a, 'RELEASE'), [], 'nothing let go on the old node')
})

test('a RENEW answered MOVED (no push): re-attached after a CLUSTERDOWN, the partition between owners', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] === 'HOLD') return grant(7, 42)
		if (args[0] === 'RENEW') {
			handOver(a, b)
			return moved(b)
		}
		return undefined
	}
	let reattaches = 0
	b.script = args => (args[0] === 'REATTACH' ? (reattaches++ === 0 ? CLUSTERDOWN : grant(99, 42)) : undefined)
	const s = await store(a.address)
	const seen = await holdFor(s, 2 * TTL_MS)
	assert.deepEqual(seen, { fence: 42n, sameFence: true, aborted: false, lost: false })
	assert.equal(commands(b, 'REATTACH').length, 2)
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '99']])
})

test('a RELEASE answered MOVED (moved as the function ended): let go on the new node', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] === 'HOLD') return grant(7, 42)
		if (args[0] === 'RELEASE') {
			handOver(a, b)
			return moved(b)
		}
		return undefined
	}
	b.script = args => (args[0] === 'REATTACH' ? grant(99, 42) : undefined)
	const s = await store(a.address)
	assert.equal(await s.lock('ho', { ttl: TTL_MS }).hold(KEY, lease => lease.fence), 42n)
	assert.equal(commands(b, 'REATTACH').length, 1)
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '99']])
})

test('a re-attach answered LOST: the lease lost, reattach_failed, its signal fired', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] === 'HOLD') {
			handOver(a, b)
			return grant(7, 42) + movedPush(7, b)
		}
		return undefined
	}
	b.script = args => (args[0] === 'REATTACH' ? NOTHING_HANDED_OVER : undefined)
	const s = await store(a.address)
	let reason: unknown
	await assert.rejects(
		s.lock('ho', { ttl: TTL_MS }).hold(KEY, async lease => {
			await whenLost(lease)
			reason = lease.signal.reason
		}),
		isText('lost', 'reattach_failed', { lock: 'ho', key: JSON.stringify(KEY) }),
	)
	assert.equal((reason as Error).message, tableText('reattach_failed', { lock: 'ho', key: JSON.stringify(KEY) }))
})

test('a re-attach unanswered: lost at its deadline (reattach_failed), not later', async () => {
	const [a, b] = await twoNodes()
	let movedAt = 0
	a.script = args => {
		if (args[0] === 'HOLD') {
			handOver(a, b)
			movedAt = performance.now()
			return grant(7, 42) + movedPush(7, b)
		}
		return undefined
	}
	b.script = args => (args[0] === 'REATTACH' ? '' : undefined)
	const s = await store(a.address)
	let lostAfter = 0
	await assert.rejects(
		s.lock('ho', { ttl: TTL_MS }).hold(KEY, async lease => {
			await whenLost(lease)
			lostAfter = performance.now() - movedAt
		}),
		isText('lost', 'reattach_failed', { lock: 'ho', key: JSON.stringify(KEY) }),
	)
	assert.ok(lostAfter <= TTL_MS, `lost ${Math.round(lostAfter)} ms after the move (ttl ${TTL_MS} ms)`)
	assert.ok(lostAfter >= TTL_MS / 2, `lost ${Math.round(lostAfter)} ms after the move: not before its deadline`)
})

test('a waiting HOLD answered MOVED: REATTACH with the same secret on the new node, granted there in its place', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] !== 'HOLD') return undefined
		return delayed(300, moved(b))
	}
	b.script = args => (args[0] === 'REATTACH' ? delayed(200, grant(5, 77)) : undefined)
	const s = await store(a.address)
	setTimeout(() => handOver(a, b), 100)
	const fence = await s.lock('ho', { ttl: TTL_MS }).hold(KEY, lease => lease.fence, { wait: '5s' })
	assert.equal(fence, 77n)
	assert.deepEqual(commands(b, 'REATTACH'), [['REATTACH', 'ho', KEY, secretOf(commands(a, 'HOLD')[0])]])
	assert.deepEqual(commands(b, 'HOLD'), [], 'not a HOLD: that would take the end of the line')
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '5']])
})

test('a waiter whose re-attach finds nothing handed over (the MOVED was the map): HOLD again with the wait left', async () => {
	const [a, b] = await twoNodes()
	handOver(a, b)
	a.layout = [{ start: 0, end: 16383, node: b }]
	// The store learned the old map: a answers CLUSTER SLOTS with it once.
	let asked = 0
	a.script = args => (args[0] === 'CLUSTER' && asked++ === 0 ? `*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:${a.port}\r\n$40\r\n${'0'.repeat(40)}\r\n` : undefined)
	b.script = args => (args[0] === 'REATTACH' ? NOTHING_HANDED_OVER : undefined)
	const s = await store(a.address)
	assert.equal(await s.lock('ho', { ttl: TTL_MS }).hold(KEY, () => 'held', { wait: '5s' }), 'held')
	const holds = commands(b, 'HOLD')
	assert.equal(holds.length, 1)
	assert.ok(Number(holds[0]![holds[0]!.indexOf('WAIT') + 1]) <= 5000)
	assert.equal(secretOf(holds[0]), secretOf(commands(a, 'HOLD')[0]))
	assert.equal(commands(b, 'REATTACH').length, 1)
})

test('a REATTACH answered MOVED back to the old node, which then refuses the dial: sent again after a pause, granted on the new owner', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] !== 'HOLD') return undefined
		// The line handed over: b is the owner in every map from now on, and a
		// stops listening just after it answers.
		setTimeout(() => {
			handOver(a, b)
			setTimeout(() => a.close(), 50)
		}, 200)
		return delayed(200, moved(b))
	}
	// b serves the slot only a moment after it named it the new owner.
	let reattaches = 0
	b.script = args => {
		if (args[0] !== 'REATTACH') return undefined
		return reattaches++ === 0 ? moved(a) : grant(5, 77)
	}
	const s = await store(a.address)
	assert.equal(await s.lock('ho', { ttl: TTL_MS }).hold(KEY, lease => lease.fence, { wait: '5s' }), 77n)
	assert.equal(commands(b, 'REATTACH').length, 2)
	assert.deepEqual(commands(b, 'HOLD'), [])
})

test("a held lease's REATTACH answered MOVED back to the old node: sent on after a pause until the new owner serves it", async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] !== 'HOLD') return undefined
		handOver(a, b)
		return grant(7, 42) + movedPush(7, b)
	}
	let reattaches = 0
	b.script = args => (args[0] === 'REATTACH' ? (reattaches++ === 0 ? moved(a) : grant(99, 42)) : undefined)
	const s = await store(a.address)
	const seen = await holdFor(s, TTL_MS)
	assert.deepEqual(seen, { fence: 42n, sameFence: true, aborted: false, lost: false })
	assert.equal(commands(b, 'REATTACH').length, 2)
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '99']])
})

test('a late grant handed over before it was confirmed: re-attaching confirms it, and the function runs', async () => {
	const [a, b] = await twoNodes()
	a.script = args => {
		if (args[0] !== 'HOLD') return args[0] === 'RENEW' ? moved(b) : undefined
		// Granted after a ttl of waiting, and handed over at once.
		setTimeout(() => handOver(a, b), TTL_MS + 100)
		return delayed(TTL_MS + 100, grant(7, 42) + movedPush(7, b))
	}
	b.script = args => (args[0] === 'REATTACH' ? grant(99, 42) : undefined)
	const s = await store(a.address)
	const fence = await s.lock('ho', { ttl: TTL_MS }).hold(
		KEY,
		async lease => {
			await sleep(TTL_MS)
			lease.check()
			return lease.fence
		},
		{ wait: '5s' },
	)
	assert.equal(fence, 42n)
	assert.equal(commands(b, 'REATTACH').length, 1)
	assert.deepEqual(commands(b, 'RELEASE'), [['RELEASE', '99']])
})
