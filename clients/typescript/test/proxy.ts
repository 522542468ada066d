/**
 * Test helper: `clients/testing/frozen_proxy.py`, a TCP forwarder that
 * SIGSTOP freezes with its sockets open (a stalled switch, as each end
 * sees it) and SIGCONT thaws.
 */

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import * as path from 'node:path'
import type { Store } from '../src/index.js'
import { firstLine, gate, REPO, until, whenLost } from './server.js'
import { isText } from './texts.js'

export interface Proxy {
	/** `127.0.0.1:PORT`: connect here to reach the target through the proxy. */
	address: string
	freeze(): void
	thaw(): void
	/** Thaws (a stopped process cannot die of SIGTERM) and ends the proxy. */
	stop(): Promise<void>
}

/** Starts a proxy in front of `target` (`host:port`). */
export async function startProxy(target: string): Promise<Proxy> {
	const script = path.join(REPO, 'clients/testing/frozen_proxy.py')
	const child = spawn('python3', [script, target], { stdio: ['ignore', 'pipe', 'inherit'] })
	const exited = once(child, 'exit')
	const first = await firstLine(child)
	if (first === undefined || !/^\d+$/.test(first)) {
		child.kill('SIGKILL')
		throw new Error(`frozen_proxy.py did not print its port (got ${JSON.stringify(first)})`)
	}
	const signal = (s: NodeJS.Signals) => {
		if (child.exitCode === null && child.signalCode === null) child.kill(s)
	}
	return {
		address: `127.0.0.1:${first}`,
		freeze: () => signal('SIGSTOP'),
		thaw: () => signal('SIGCONT'),
		async stop() {
			if (child.exitCode !== null || child.signalCode !== null) return
			signal('SIGCONT')
			signal('SIGKILL')
			await exited
		},
	}
}

/**
 * A holder behind `proxy` (through `behind`, ttl 2 s) and a waiter through
 * `direct` with a long wait; the proxy frozen. Asserts that the holder's
 * signal aborted at least 10 ms before the waiter's grant, within the ttl
 * plus 0.5 s of the freeze, and that its hold rejected `lost_silent`.
 */
export async function lostBeforeTheKeyMovesOn(proxy: Proxy, behind: Store, direct: Store, lock: string): Promise<void> {
	const ttlMs = 2000
	const held = gate()
	let lostAt = 0
	const hold = behind.lock(lock, { ttl: '2s' }).hold('k', async lease => {
		held.open()
		await whenLost(lease)
		lostAt = performance.now()
		assert.equal(lease.lost, true)
	})
	hold.catch(() => {})
	await held.opened
	let grantedAt = 0
	const waiting = direct.lock(lock).hold('k', () => (grantedAt = performance.now()), { wait: '30s' })
	await until('the waiter in line', async () => (await direct.stats(lock)).waiters === 1)
	proxy.freeze()
	const frozenAt = performance.now()
	await waiting
	await assert.rejects(hold, isText('lost', 'lost_silent', { lock, key: '"k"', ttl: '2s' }))
	assert.ok(lostAt > 0, 'the holder saw its loss')
	assert.ok(lostAt <= grantedAt - 10, `lost ${(grantedAt - lostAt).toFixed(1)}ms before the other grant, not at least 10ms`)
	assert.ok(lostAt - frozenAt <= ttlMs + 500, `lost ${(lostAt - frozenAt).toFixed(0)}ms after the freeze`)
}
