/** The calls a holder makes (hold, tryHold, fences, the fenced write) and closing a store. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { bigintsAsText, connect, HoldlineError, type Lease, type Store } from '../src/index.js'
import { sharedServer, until } from './server.js'

const shared = sharedServer()

test('hold, tryHold and a fenced charge, as an invoice service uses them', async () => {
	const invoice = { id: 'inv-9', total: 42 }
	const fences: bigint[] = []
	const said: string[] = []
	const used: unknown[] = []
	async function charge(inv: typeof invoice, { fence, signal }: { fence: bigint; signal: AbortSignal }) {
		assert.equal(inv, invoice)
		assert.equal(typeof fence, 'bigint')
		assert.ok(signal instanceof AbortSignal)
		assert.equal(signal.aborted, false)
		fences.push(fence)
	}
	const work = async (lease: Lease) => {
		fences.push(lease.fence)
		return `receipt ${lease.key}`
	}
	const use = (v: unknown) => used.push(v)
	const say = (s: string) => said.push(s)

	const invoices = shared.store.lock('invoices', { ttl: '10s', maxHold: '2m' })

	await invoices.hold(invoice.id, async lease => {
		await charge(invoice, { fence: lease.fence, signal: lease.signal })
	})
	await invoices.hold(invoice.id, work, { wait: '30s' }) // stand in line up to 30 seconds

	const tried = await invoices.tryHold(invoice.id, work)
	if (tried.acquired) use(tried.value)
	else say('someone is charging it already')

	assert.deepEqual(used, ['receipt inv-9'])
	assert.deepEqual(said, [])
	assert.equal(fences.length, 3)
	assert.ok(fences[0]! < fences[1]! && fences[1]! < fences[2]!, `fences grow: ${fences}`)

	// The same tryHold while another holder has the key: the function is not run.
	let ran = false
	await invoices.hold(invoice.id, async () => {
		const elsewhere = await connect(shared.server.address)
		try {
			const tried = await elsewhere.lock('invoices').tryHold(invoice.id, () => (ran = true))
			if (tried.acquired) use(tried.value)
			else say('someone is charging it already')
		} finally {
			await elsewhere.close()
		}
	})
	assert.equal(ran, false)
	assert.deepEqual(said, ['someone is charging it already'])
})

test('hold answers what the function answered; a rejection propagates unchanged and lets the key go', async () => {
	const lock = shared.store.lock('answers')
	assert.equal(await lock.hold('k', () => 7), 7)
	assert.deepEqual(await lock.hold('k', async lease => ({ key: lease.key })), { key: 'k' })
	const mine = new RangeError('mine')
	await assert.rejects(
		lock.hold('k', async () => {
			throw mine
		}),
		e => e === mine,
	)
	const sync = { not: 'an error' }
	await assert.rejects(
		lock.hold('k', () => {
			throw sync
		}),
		e => e === sync,
	)
	// Let go after the rejections: a try gets it at once.
	const tried = await lock.tryHold('k', lease => lease.lost)
	assert.deepEqual(tried, { acquired: true, value: false })
})

test('a number key is its decimal text', async () => {
	const lock = shared.store.lock('numbers')
	await lock.hold(9, async lease => {
		assert.equal(lease.key, '9')
		assert.deepEqual(await shared.store.lock('numbers').tryHold('9', () => 'ran'), { acquired: false })
	})
	await lock.hold(2n ** 70n, lease => assert.equal(lease.key, '1180591620717411303424'))
})

test('fences are bigints above every earlier grant of the key', async () => {
	const lock = shared.store.lock('fences')
	let last = -1n
	for (let i = 0; i < 20; i++) {
		const fence = await lock.hold('f', lease => lease.fence)
		assert.equal(typeof fence, 'bigint')
		assert.ok(fence > last)
		last = fence
	}
})

test('JSON.stringify writes a lease, and any bigint through bigintsAsText, with fences as decimal text', async () => {
	const lock = shared.store.lock('json')
	await lock.hold('j', lease => {
		assert.deepEqual(JSON.parse(JSON.stringify(lease)), { key: 'j', fence: lease.fence.toString(), permits: 1, lost: false })
		assert.throws(() => JSON.stringify({ fence: lease.fence }), TypeError)
		assert.equal(JSON.stringify({ fence: lease.fence, n: 1 }, bigintsAsText), `{"fence":"${lease.fence}","n":1}`)
		// Past 2^53: the text keeps every digit a number would round away.
		assert.ok(lease.fence > 2n ** 53n)
	})
})

test('the fenced write takes the current fence and refuses an older one', async () => {
	const lock = shared.store.lock('rows')
	const old = await lock.hold('r', async lease => {
		await shared.store.put('rows', 'r', lease.fence, 'row-r', 'first')
		return lease.fence
	})
	await lock.hold('r', async lease => {
		await shared.store.put('rows', 'r', lease.fence, 'row-r', 'second')
		await assert.rejects(shared.store.put('rows', 'r', old, 'row-r', 'late'), (e: unknown) => e instanceof HoldlineError && e.kind === 'lost')
	})
	assert.equal(await shared.store.get('row-r'), 'second')
	assert.equal(await shared.store.get('no-such-row'), null)
})

test('await using closes the store at the end of its block; close() twice is fine', async () => {
	let kept: Store | undefined
	{
		await using scoped = await connect(shared.server.address)
		kept = scoped
		assert.equal(await scoped.lock('scoped').hold('k', () => 'in'), 'in')
		assert.equal(scoped.closed, false)
	}
	assert.equal(kept.closed, true)
	assert.throws(
		() => kept!.lock('scoped'),
		(e: unknown) => e instanceof HoldlineError && e.kind === 'closed',
	)
	await kept.close()
	// Leaving the block takes a waiting hold out of the line: it fails closed.
	await shared.store.lock('scoped').hold('w', async () => {
		let waiting: Promise<string> | undefined
		{
			await using s = await connect(shared.server.address)
			waiting = s.lock('scoped').hold('w', () => 'never', { wait: '30s' })
			waiting.catch(() => {})
			await until('one waiter', async () => (await shared.store.stats('scoped')).waiters === 1)
		}
		await assert.rejects(waiting, (e: unknown) => e instanceof HoldlineError && e.kind === 'closed')
		await until('the line empty', async () => (await shared.store.stats('scoped')).waiters === 0)
	})
})
