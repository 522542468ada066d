/**
 * Leases that stay safe across a network: a holder behind a frozen link
 * takes its lease for lost before the server can give the key to the next
 * in line; a waiter behind one gives up and is granted nothing later; a
 * holder process stopped past its ttl finds its lease lost at its first look.
 * The link is `clients/testing/frozen_proxy.py`, stopped with SIGSTOP while
 * its sockets stay open.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect } from '../src/index.js'
import { runScript } from './child.js'
import { lostBeforeTheKeyMovesOn, startProxy } from './proxy.js'
import { holdOpen, sharedServer, sleep, until } from './server.js'
import { isText, tableText } from './texts.js'

const shared = sharedServer()

test('a holder behind a frozen link is told of its loss before another client is granted the key', async () => {
	const proxy = await startProxy(shared.server.address)
	try {
		await using behind = await connect(proxy.address)
		await lostBeforeTheKeyMovesOn(proxy, behind, shared.store, 'net')
	} finally {
		await proxy.stop()
	}
})

test('a waiter behind a frozen link gives up closed after its wait plus its ttl, and keeps nothing', async () => {
	const proxy = await startProxy(shared.server.address)
	const behind = await connect(proxy.address)
	try {
		const letGo = await holdOpen(shared.store.lock('wait'), 'w')
		let ran = false
		const started = performance.now()
		const waiting = behind.lock('wait', { ttl: '2s' }).hold('w', () => (ran = true), { wait: '3s' })
		waiting.catch(() => {})
		await until('the waiter in line', async () => (await shared.store.stats('wait')).waiters === 1)
		proxy.freeze()
		// The key goes to the waiter while its link is frozen: the grant never reaches it.
		await letGo()
		await assert.rejects(waiting, isText('closed', 'wait_silent', { lock: 'wait', key: '"w"', wait: '3s', ttl: '2s' }))
		const took = performance.now() - started
		assert.ok(took >= 3000 + 2000 - 50, `gave up after ${took.toFixed(0)}ms, before its wait plus its ttl`)
		assert.ok(took <= 3000 + 2000 + 1000, `gave up after ${took.toFixed(0)}ms`)
		proxy.thaw()
		// The abandoned waiter does not keep the key: another client gets it.
		assert.equal(await shared.store.lock('wait').hold('w', () => 'mine', { wait: '10s' }), 'mine')
		assert.equal(ran, false, 'the abandoned waiter never ran')
	} finally {
		await proxy.stop()
		await behind.close()
	}
})

test('a holder process stopped past its ttl finds its leases lost at its first look', async () => {
	const ttl = '3s'
	const h = runScript('spinner.js', [shared.server.address, 'stalled', ttl])
	try {
		await h.next('spinning')
		h.child.kill('SIGSTOP')
		const stoppedAt = performance.now()
		// Past the ttl, and the key given to the next in line meanwhile.
		assert.equal(await shared.store.lock('stalled').hold('a', lease => lease.key, { wait: '20s' }), 'a')
		while (performance.now() - stoppedAt < 4000) await sleep(100)
		const contAt = performance.now()
		h.child.kill('SIGCONT')
		// Each lease's last look that read not lost came before the stop, its
		// first look that read lost after it, with no timer or reply between.
		const gapsMs = await h.next<number[]>('gapsMs')
		for (const gap of gapsMs) assert.ok(gap >= contAt - stoppedAt - 1, `gaps ${gapsMs}ms, the stop lasted ${contAt - stoppedAt}ms`)
		const silent = (key: string) => ({ kind: 'lost', message: tableText('lost_silent', { lock: 'stalled', key: `"${key}"`, ttl }) })
		assert.deepEqual(h.lines.find(l => 'gapsMs' in l)?.reasons, [silent('a'), silent('b'), silent('c')])
		assert.deepEqual(await h.next('rejected'), silent('c'))
		assert.equal(await h.exited, 0)
	} finally {
		h.child.kill('SIGCONT')
		h.child.kill('SIGKILL')
		await h.exited
	}
})
