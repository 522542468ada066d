/** `lock.inspect(key)`: the server's `INSPECT` passed through, against a real server; and the reading of its answer. */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, HoldlineError, type Lease } from '../src/index.js'
import { keyState } from '../src/inspect.js'
import { RespError, type Reply } from '../src/resp.js'
import { gate, sharedServer, until } from './server.js'

const shared = sharedServer()

test("inspect answers null for a key with no state; while held, the holder's fence, clock, connection and line; once let go, free", async () => {
	const ttlMs = 2000
	const lock = shared.store.lock('inspect', { ttl: ttlMs })
	assert.equal(await lock.inspect('k'), null)

	const release = gate()
	const grant = gate<Lease>()
	const holding = lock.hold(7, async lease => {
		grant.open(lease)
		await release.opened
	})
	const lease = await grant.opened
	const waiting = lock.hold('7', () => 'next', { wait: '30s' })
	await until('the waiter in line', async () => (await shared.store.stats('inspect')).waiters === 1)

	const state = await lock.inspect(7)
	assert.ok(state)
	assert.equal(state.held, true)
	assert.equal(state.fence, lease.fence)
	assert.equal(state.waiters, 1)
	assert.ok(state.leaseLeftMs !== null && state.leaseLeftMs > 0 && state.leaseLeftMs <= ttlMs, `lease left ${state.leaseLeftMs}`)
	assert.ok(state.heldForMs !== null && state.heldForMs >= 0, `held for ${state.heldForMs}`)
	const holder = state.holder
	assert.ok(holder, 'a holder while held')
	assert.ok(holder.id > 0 && holder.lease > 0, `id ${holder.id}, lease ${holder.lease}`)
	assert.equal(holder.name, null)
	assert.match(holder.addr, /^127\.0\.0\.1:\d+$/)
	assert.equal(holder.fence, lease.fence)
	assert.equal(holder.permits, 1)
	assert.equal(holder.note, '')
	assert.equal(state.holders, 1)
	assert.equal(state.permitsHeld, 1)
	assert.deepEqual(state.holderList, [holder])

	release.open()
	await holding
	assert.equal(await waiting, 'next')
	const freed = await lock.inspect('7')
	assert.ok(freed)
	const free = { held: false, fence: undefined, heldForMs: null, leaseLeftMs: null, waiters: 0, holder: null, holders: 0, permitsHeld: 0, holderList: [] }
	assert.deepEqual({ ...freed, fence: undefined }, free)
	assert.ok(freed.fence > lease.fence, 'the waiter was granted after it')
})

test('inspect fails as the other calls do: a bad key at once, a closed store closed', async () => {
	const own = await connect(shared.server.address)
	const lock = own.lock('inspect')
	await assert.rejects(lock.inspect(1.5), (e: unknown) => e instanceof HoldlineError && e.kind === 'invalid' && e.message === 'lock inspect: a key is text or a whole number, not 1.5: invalid')
	await own.close()
	await assert.rejects(lock.inspect('k'), (e: unknown) => e instanceof HoldlineError && e.kind === 'closed' && e.message === 'lock inspect: key "k": the store is closed: closed')
})

test("INSPECT's answer read: a RESP3 map or a RESP2 flat array, unknown fields skipped, a server before permits read as one holder of one permit, anything else invalid", () => {
	const holder = new Map<string, bigint | string | null>([
		['id', 3n],
		['name', 'worker'],
		['addr', '10.0.0.1:5000'],
		['lease', 9n],
	])
	const fields: Array<[string, Reply]> = [
		['held', true],
		['fence', 2n ** 62n],
		['held_for_ms', 5n],
		['lease_left_ms', 95n],
		['waiters', 2n],
		['holder', holder],
		['later', 'x'],
	]
	// A server before permits: no counts, no list, no fence or permits of the holder (and no note: '').
	const oneHolder = { id: 3, name: 'worker', addr: '10.0.0.1:5000', lease: 9, fence: 2n ** 62n, permits: 1, note: '' }
	const want = { held: true, fence: 2n ** 62n, heldForMs: 5, leaseLeftMs: 95, waiters: 2, holder: oneHolder, holders: 1, permitsHeld: 1, holderList: [oneHolder] }
	assert.deepEqual(keyState(new Map(fields), 'l', 'k'), want)
	assert.deepEqual(keyState(fields.flat(), 'l', 'k'), want)
	// A server with permits and notes: two holders, each with its fence, permits and note.
	const first = new Map<string, Reply>([...holder, ['fence', 7n], ['permits', 2n], ['note', '10.0.0.1:8080']])
	const second = new Map<string, Reply>([
		['id', 4n],
		['name', null],
		['addr', '10.0.0.2:6000'],
		['lease', 1n],
		['fence', 8n],
		['permits', 1n],
		['note', ''],
	])
	const withPermits: Array<[string, Reply]> = [
		...fields.filter(([name]) => name !== 'holder' && name !== 'fence'),
		['fence', 8n],
		['holder', first],
		['holders', 2n],
		['permits_held', 3n],
		['holder_list', [first, second]],
	]
	const firstRead = { ...oneHolder, fence: 7n, permits: 2, note: '10.0.0.1:8080' }
	const secondRead = { id: 4, name: null, addr: '10.0.0.2:6000', lease: 1, fence: 8n, permits: 1, note: '' }
	const wantPermits = { ...want, fence: 8n, holder: firstRead, holders: 2, permitsHeld: 3, holderList: [firstRead, secondRead] }
	assert.deepEqual(keyState(new Map(withPermits), 'l', 'k'), wantPermits)
	// RESP2: every map a flat array, the holders' too.
	const flatHolder = (m: Map<string, Reply>) => [...m].flat()
	const flat = withPermits.map(([name, value]): [string, Reply] => [name, name === 'holder' ? flatHolder(first) : name === 'holder_list' ? [flatHolder(first), flatHolder(second)] : value])
	assert.deepEqual(keyState(flat.flat(), 'l', 'k'), wantPermits)
	assert.equal(keyState(null, 'l', 'k'), null)
	const bad = (reply: Reply) =>
		assert.throws(
			() => keyState(reply, 'l', 'k'),
			(e: unknown) => e instanceof HoldlineError && e.kind === 'invalid' && e.message.startsWith('lock l: key "k": the server answered INSPECT with'),
		)
	bad('OK')
	bad(new RespError('ERR', 'no'))
	bad(new Map(fields.filter(([name]) => name !== 'fence')))
	bad(new Map([...fields.filter(([name]) => name !== 'holder'), ['holder', 'someone']]))
	bad(new Map([...fields.filter(([name]) => name !== 'waiters'), ['waiters', -1n]]))
	bad(new Map([...withPermits.filter(([name]) => name !== 'holders'), ['holders', 'two']]))
	bad(new Map([...withPermits.filter(([name]) => name !== 'holder_list'), ['holder_list', 'everyone']]))
	bad(new Map([...withPermits.filter(([name]) => name !== 'holder_list'), ['holder_list', [first, 'someone']]]))
	bad(new Map([...withPermits.filter(([name]) => name !== 'holder_list'), ['holder_list', [new Map([...second, ['permits', -1n]])]]]))
	bad(new Map([...withPermits.filter(([name]) => name !== 'holder_list'), ['holder_list', [new Map([...second, ['note', 5n]])]]]))
})
