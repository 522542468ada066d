/** FIFO lines across holders, renewal while holding and while waiting, and leaving a line. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError } from '../src/index.js'
import { gate, holdOpen, sharedServer, sleep, until } from './server.js'

const shared = sharedServer()

test('waiters get the key in the order they began to wait, across stores', async () => {
	const lock = shared.store.lock('fifo')
	const others = await Promise.all([1, 2, 3].map(() => connect(shared.server.address)))
	try {
		const letGo = await holdOpen(lock, 'q')
		const order: number[] = []
		const waiting: Promise<void>[] = []
		for (let i = 0; i < 6; i++) {
			// Alternate between this store and three others, so the line spans connections of several stores.
			const via = i % 2 === 0 ? lock : others[i % 3]!.lock('fifo')
			waiting.push(via.hold('q', async () => void order.push(i), { wait: '30s' }))
			await until(`waiter ${i} in line`, async () => (await shared.store.stats('fifo')).waiters === i + 1)
		}
		await letGo()
		await Promise.all(waiting)
		assert.deepEqual(order, [0, 1, 2, 3, 4, 5])
	} finally {
		await Promise.all(others.map(s => s.close()))
	}
})

test('a lease is renewed while its function runs, past many ttls', async () => {
	const lock = shared.store.lock('renewed', { ttl: '1s' })
	await lock.hold('r', async lease => {
		await sleep(3500)
		assert.equal(lease.lost, false)
		assert.equal(lease.signal.aborted, false)
	})
	const stats = await shared.store.stats('renewed')
	assert.equal(stats.expirations, 0)
})

test('a hold that waits past its ttl is granted a live lease', async () => {
	const lock = shared.store.lock('waited', { ttl: '1s' })
	const held = gate()
	const holder = lock.hold('w', async () => {
		held.open()
		await sleep(2500)
	})
	await held.opened
	const after = await lock.hold('w', async lease => {
		await sleep(1500)
		return lease.lost
	})
	await holder
	assert.equal(after, false)
	assert.equal((await shared.store.stats('waited')).expirations, 0)
})

test("a waiting hold never delays another hold's renewal or release", async () => {
	const lock = shared.store.lock('busy', { ttl: '1s' })
	const letGoOfA = await holdOpen(lock, 'a')
	// Several holds wait on `a` for the whole test ...
	const waiters = [1, 2, 3].map(() => lock.hold('a', () => 'late', { wait: '30s' }))
	await until('three waiters', async () => (await shared.store.stats('busy')).waiters === 3)
	// ... while this one holds `b` past several ttls and lets it go.
	await lock.hold('b', async lease => {
		await sleep(3000)
		assert.equal(lease.lost, false)
	})
	// `b` is free the moment hold answered, seen from another store.
	const other = await connect(shared.server.address)
	try {
		assert.deepEqual(await other.lock('busy').tryHold('b', () => 'got it'), { acquired: true, value: 'got it' })
	} finally {
		await other.close()
	}
	await letGoOfA()
	assert.deepEqual(await Promise.all(waiters), ['late', 'late', 'late'])
	assert.equal((await shared.store.stats('busy')).expirations, 0)
})

test('aborting a waiting hold takes it out of the line', async () => {
	const lock = shared.store.lock('abort')
	const letGo = await holdOpen(lock, 'x')
	const controller = new AbortController()
	let ran = false
	const waiting = lock.hold('x', () => (ran = true), { wait: '30s', signal: controller.signal })
	const behind = lock.hold('x', () => 'behind', { wait: '30s' })
	await until('two waiters', async () => (await shared.store.stats('abort')).waiters === 2)
	const why = new Error('changed my mind')
	controller.abort(why)
	await assert.rejects(waiting, e => e === why)
	await until('one waiter', async () => (await shared.store.stats('abort')).waiters === 1)
	await letGo()
	assert.equal(await behind, 'behind')
	assert.equal(ran, false)
	// An already aborted signal never asks.
	await assert.rejects(
		lock.hold('x', () => 1, { signal: AbortSignal.abort(why) }),
		e => e === why,
	)
})

test('many concurrent holds of one key run one at a time', async () => {
	const lock = shared.store.lock('mutex')
	let inside = 0
	let most = 0
	let count = 0
	await Promise.all(
		Array.from({ length: 40 }, () =>
			lock.hold(
				'm',
				async () => {
					inside++
					most = Math.max(most, inside)
					await sleep(2)
					count++
					inside--
				},
				{ wait: '60s' },
			),
		),
	)
	assert.equal(most, 1)
	assert.equal(count, 40)
})

test('the lease knows whether it was lost', async () => {
	const lock = shared.store.lock('check')
	await lock.hold('c', lease => {
		assert.equal(lease.lost, false)
		lease.check()
		assert.ok(!(lease.signal.reason instanceof HoldlineError))
	})
})

test('the longest wait a client takes waits as long as it takes, then is granted', async () => {
	const lock = shared.store.lock('longest')
	const letGo = await holdOpen(lock, 'l')
	let ended = false
	const waiting = lock
		.hold('l', () => 'granted', { wait: Number.MAX_SAFE_INTEGER })
		.finally(() => {
			ended = true
		})
	await until('the waiter stands in line', async () => (await shared.store.stats('longest')).waiters === 1)
	// A wait past setTimeout's range (about 24.8 days) was given up after 1 ms.
	await sleep(300)
	assert.equal(ended, false, 'the wait has not ended')
	await letGo()
	assert.equal(await waiting, 'granted')
})
