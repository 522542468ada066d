/** Holders in other processes: killed (the key moves on at once) and stopped (lost after its ttl). */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { INDEX_URL, runProgram, runScript } from './child.js'
import { sharedServer, sleep } from './server.js'
import { tableText } from './texts.js'

const shared = sharedServer()

/** A holder process (`holder.ts`) and the lines it reports, in order. */
function holder(lock: string, key: string, ttl: string) {
	return runScript('holder.js', [shared.server.address, lock, key, ttl])
}

function kill(child: ChildProcess, signal: NodeJS.Signals) {
	assert.ok(child.kill(signal), `sent ${signal}`)
}

test('a holder process killed: the next in line gets the key at once', async () => {
	const h = holder('procs', 'killed', '60s')
	const fence = BigInt(await h.next<string>('held'))
	const lock = shared.store.lock('procs')
	const started = Date.now()
	const waiting = lock.hold('killed', lease => lease.fence, { wait: '30s' })
	// Let the waiter stand in line, then kill the holder (a ttl of 60 s would be far longer).
	await sleep(200)
	kill(h.child, 'SIGKILL')
	const next = await waiting
	const waited = Date.now() - started
	assert.ok(next > fence)
	assert.ok(waited < 20_000, `the key came after ${waited}ms, not at the holder's ttl`)
	await h.exited
})

test('a holder process stopped: lost after its ttl, its signal aborted once it runs again', async () => {
	const h = holder('procs', 'stopped', '1s')
	const silent = tableText('lost_silent', { lock: 'procs', key: '"stopped"', ttl: '1s' })
	const fence = BigInt(await h.next<string>('held'))
	kill(h.child, 'SIGSTOP')
	try {
		const lock = shared.store.lock('procs')
		const started = Date.now()
		await lock.hold(
			'stopped',
			async lease => {
				assert.ok(Date.now() - started >= 500, 'not granted before the stopped holder could run out')
				assert.ok(lease.fence > fence)
				await shared.store.put('procs', 'stopped', lease.fence, 'row-stopped', 'from the new holder')
				// The stopped holder runs again while this one holds the key.
				kill(h.child, 'SIGCONT')
				// Stopped past its ttl, it finds the lease lost by its own clock
				// before it reads the server's news of the loss.
				const aborted = await h.next('aborted')
				assert.deepEqual(aborted, { kind: 'lost', message: silent })
				const put = await h.next<{ kind: string }>('put')
				assert.equal(put.kind, 'lost')
			},
			{ wait: '20s' },
		)
		assert.deepEqual(await h.next('rejected'), { kind: 'lost', message: silent })
		assert.equal(await shared.store.get('row-stopped'), 'from the new holder')
		assert.equal((await shared.store.stats('procs')).expirations, 1)
	} finally {
		h.child.kill('SIGCONT')
		h.child.kill('SIGKILL')
		await h.exited
	}
})

test('a program that never closes its store exits by itself once its work is done, printing nothing of its own', async () => {
	const program = `
		import { connect } from ${JSON.stringify(INDEX_URL)}
		const store = await connect(${JSON.stringify(shared.server.address)})
		const invoices = store.lock('exits', { ttl: '2s' })
		console.log(await invoices.hold('k', async lease => { await new Promise(r => setTimeout(r, 500)); return String(lease.lost) }))
		console.log(JSON.stringify(await invoices.tryHold('k', () => 'again')))
		const other = await connect(${JSON.stringify(shared.server.address)})
		await invoices.hold('busy', () => other.lock('exits').hold('busy', () => 1, { wait: '100ms' }).catch(e => console.log(e.kind)))
		console.log((await store.stats('exits')).timeouts)
	`
	assert.equal(await runProgram(program), 'false\n{"acquired":true,"value":"again"}\nin use\n1\n')
})
