/**
 * Notes and elections against a real server: `hold`'s and `tryHold`'s
 * `note`, `lock.election(name)` (campaign, leader, proclaim, resign, a
 * leadership lost), `observe()` (the present leader first, every change,
 * a connection killed under it, stopping), the campaigner program, and
 * `clients/testing/election.py` run with it.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import * as fs from 'node:fs'
import * as path from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'
import { connect, HoldlineError, type Leadership, type Store } from '../src/index.js'
import { Connection } from '../src/connection.js'
import { gate, holdlineBin, REPO, sharedServer, until, whenLost } from './server.js'

const shared = sharedServer()

/** A connection of the test's own, for `CLIENT LIST`, `CLIENT ID` and `CLIENT KILL`. */
async function admin(): Promise<Connection & AsyncDisposable> {
	const [host, port] = shared.server.address.split(':') as [string, string]
	const connection = await Connection.open({ host, port: Number(port) }, undefined, 10_000)
	return Object.assign(connection, { [Symbol.asyncDispose]: async () => connection.destroy() })
}

/** The ids of the server's connections, as `CLIENT LIST` shows them. */
async function clientIds(connection: Connection): Promise<number[]> {
	const list = String(await connection.send(['CLIENT', 'LIST']))
	return [...list.matchAll(/^id=(\d+) /gm)].map(m => Number(m[1]))
}

/** Kills connection `id` (`CLIENT KILL ID id`), asserting the server did. */
async function kill(connection: Connection, id: number): Promise<void> {
	assert.equal(await connection.send(['CLIENT', 'KILL', 'ID', id]), 1n, 'one connection killed')
}

/** The iterator's next item within `ms`; rejects after that. */
async function nextWithin<T>(it: AsyncIterator<T>, ms = 5000): Promise<T> {
	let timer: NodeJS.Timeout | undefined
	const timeout = new Promise<never>((_, reject) => {
		timer = setTimeout(() => reject(new Error(`no item within ${ms} ms`)), ms)
	})
	try {
		const next = await Promise.race([it.next(), timeout])
		assert.equal(next.done, false, 'the observation ended')
		return next.value as T
	} finally {
		clearTimeout(timer)
	}
}

const isError = (kind: string, message: string) => (e: unknown) => e instanceof HoldlineError && e.kind === kind && e.message === message

test("hold and tryHold carry a note, which inspect shows on the holder; a bad note is the server's to refuse", async () => {
	const lock = shared.store.lock('notes')
	const seen = await lock.hold('job', async () => (await lock.inspect('job'))?.holder?.note, { note: 'worker 7, job 42' })
	assert.equal(seen, 'worker 7, job 42')
	const tried = await lock.tryHold('job', async () => (await lock.inspect('job'))?.holderList.map(h => h.note), { note: 'ünïcode ✓' })
	assert.deepEqual(tried, { acquired: true, value: ['ünïcode ✓'] })
	assert.equal(await lock.hold('job', async () => (await lock.inspect('job'))?.holder?.note), '', 'no note: empty')
	const bad = 'lock notes: key "job": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid'
	await assert.rejects(
		lock.hold('job', () => 'never', { note: 'two\nlines' }),
		isError('invalid', bad),
	)
	await assert.rejects(
		lock.tryHold('job', () => 'never', { note: 'x'.repeat(1025) }),
		isError('invalid', bad),
	)
	assert.equal(await lock.hold('job', () => 'fine', { note: 'x'.repeat(1024) }), 'fine')
})

test('campaign elects, leader() and proclaim show the note, the lead resigns after its function; leader() is null when free', async () => {
	const lock = shared.store.lock('elections', { ttl: '5s' })
	const election = lock.election('billing')
	assert.equal(election.name, 'billing')
	assert.equal(election.lock, 'elections')
	assert.equal(await election.leader(), null, 'never held')
	const value = await election.campaign('10.0.0.5:8080', async lead => {
		assert.equal(typeof lead.fence, 'bigint')
		assert.equal(lead.note, '10.0.0.5:8080')
		assert.equal(lead.lost, false)
		assert.equal(lead.signal.aborted, false)
		const leader = await election.leader()
		assert.ok(leader)
		assert.deepEqual({ ...leader, heldForMs: 0 }, { note: '10.0.0.5:8080', fence: lead.fence, heldForMs: 0 })
		assert.ok(leader.heldForMs !== null && leader.heldForMs >= 0, `held for ${leader.heldForMs}`)
		await lead.proclaim('10.0.0.6:8080')
		assert.equal(lead.note, '10.0.0.6:8080')
		assert.equal((await election.leader())?.note, '10.0.0.6:8080')
		await assert.rejects(lead.proclaim('bad\u0007'), isError('invalid', 'lock elections: key "billing": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid'))
		assert.equal((await election.leader())?.note, '10.0.0.6:8080', 'a refused proclaim changes nothing')
		return `led under ${lead.fence}`
	})
	assert.match(value, /^led under \d+$/)
	assert.equal(await election.leader(), null, 'resigned after the function')
	// The lead kept past its function: resigned, its signal aborted, proclaim refused.
	const kept = await election.campaign('kept', lead => lead)
	assert.equal(kept.signal.aborted, true)
	assert.equal(kept.signal.reason.message, 'lock elections: key "billing": the lease was lost: the leader resigned')
	assert.equal(kept.lost, false)
	await assert.rejects(kept.proclaim('late'), isError('invalid', 'lock elections: key "billing": proclaimed after the leadership ended: invalid'))
	await kept.resign() // nothing more
	// A rejection of the function propagates unchanged, and the lead resigns all the same.
	const oops = new Error('oops')
	await assert.rejects(
		election.campaign('n', () => Promise.reject(oops)),
		e => e === oops,
	)
	assert.equal(await election.leader(), null)
	await assert.rejects(
		election.campaign('n', async () => election.campaign('again', () => 'never')),
		isError('invalid', 'lock elections: key "billing": hold inside a hold of the same key: invalid'),
	)
})

test('a second campaigner waits while the first leads, and is elected with a greater fence once the first resigns', async () => {
	const lock = shared.store.lock('elections', { ttl: '5s' })
	const other = await connect(shared.server.address)
	try {
		const election = lock.election('resign')
		const first = gate<Leadership>()
		const resigned = gate()
		const firstDone = election.campaign('first', async lead => {
			first.open(lead)
			await resigned.opened
			return 'first done'
		})
		const lead1 = await first.opened
		const second = gate<Leadership>()
		const secondDone = other
			.lock('elections', { ttl: '5s' })
			.election('resign')
			.campaign('second', async lead => {
				second.open(lead)
				const leader = await election.leader()
				return { fence: lead.fence, leader: leader && { note: leader.note, fence: leader.fence } }
			})
		await until('the second campaigner in line', async () => (await lock.inspect('resign'))?.waiters === 1)
		assert.equal((await election.leader())?.note, 'first')

		await lead1.resign()
		assert.equal(lead1.signal.aborted, true)
		assert.ok(lead1.signal.reason instanceof HoldlineError)
		assert.equal(lead1.signal.reason.message, 'lock elections: key "resign": the lease was lost: the leader resigned')
		assert.equal(lead1.lost, false, 'resigned, not lost')
		await lead1.resign() // again: nothing more
		await assert.rejects(lead1.proclaim('late'), isError('invalid', 'lock elections: key "resign": proclaimed after the leadership ended: invalid'))
		const lead2 = await second.opened
		assert.ok(lead2.fence > lead1.fence, `${lead2.fence} > ${lead1.fence}`)
		assert.deepEqual(await secondDone, { fence: lead2.fence, leader: { note: 'second', fence: lead2.fence } })
		resigned.open()
		assert.equal(await firstDone, 'first done', 'resolves with its value, no RELEASE of its own')
		assert.equal(await election.leader(), null)
	} finally {
		await other.close()
	}
})

test("a leadership lost (its connection killed) aborts the lead's signal, fails campaign lost, and elects the next with a greater fence; a waiting campaign aborted leaves the line", async () => {
	const lock = shared.store.lock('elections', { ttl: '5s' })
	const election = lock.election('lose')
	await using killer = await admin()
	const first = gate<Leadership>()
	const firstDone = election.campaign('first', async lead => {
		first.open(lead)
		await whenLost(lead)
		return 'dropped'
	})
	const lead1 = await first.opened
	const second = gate<bigint>()
	const secondDone = election.campaign('second', lead => second.open(lead.fence))
	await until('the second campaigner in line', async () => (await lock.inspect('lose'))?.waiters === 1)
	const holder = (await lock.inspect('lose'))?.holder
	assert.ok(holder)
	const lost = 'lock elections: key "lose": the lease was lost: its connection to the server closed'
	// The killed connection's close and the kill's reply come on two
	// connections, in either order: `firstDone` may reject before `kill`
	// resolves, so its rejection is awaited from before the kill on (not
	// left unhandled meanwhile).
	const firstLost = assert.rejects(firstDone, isError('lost', lost))
	await kill(killer, holder.id)
	await firstLost
	assert.equal(lead1.lost, true)
	assert.equal(lead1.signal.reason.message, lost)
	await assert.rejects(lead1.proclaim('late'), isError('lost', lost))
	assert.ok((await second.opened) > lead1.fence)
	await secondDone

	// Aborting a campaign that waits takes it out of the line.
	const aborter = new AbortController()
	const held = gate()
	const release = gate()
	const leading = election.campaign('leader', async () => {
		held.open()
		await release.opened
	})
	await held.opened
	const waiting = election.campaign('waiter', () => 'never', { signal: aborter.signal })
	await until('the waiter in line', async () => (await lock.inspect('lose'))?.waiters === 1)
	aborter.abort(new Error('stop campaigning'))
	await assert.rejects(waiting, (e: unknown) => e instanceof Error && e.message === 'stop campaigning')
	await until('the line empty', async () => (await lock.inspect('lose'))?.waiters === 0)
	release.open()
	await leading
})

test('observe yields the present leader first, then each grant, proclaim and end, in order', async () => {
	const lock = shared.store.lock('elections', { ttl: '5s' })
	const election = lock.election('watched')
	const observer = election.observe()
	assert.equal(await nextWithin(observer), null, 'nobody leads yet')

	const step = gate()
	const done = election.campaign('a:1', async lead => {
		await step.opened
		await lead.proclaim('a:2')
		return lead.fence
	})
	const granted = await nextWithin(observer)
	assert.ok(granted)
	assert.equal(granted.note, 'a:1')
	assert.equal(granted.heldForMs, null)
	step.open()
	assert.deepEqual(await nextWithin(observer), { note: 'a:2', fence: granted.fence, heldForMs: null })
	assert.equal(await done, granted.fence)
	assert.equal(await nextWithin(observer), null, 'resigned')
	await election.campaign('b:1', () => {})
	const next = await nextWithin(observer)
	assert.ok(next && next.fence > granted.fence && next.note === 'b:1', `${next?.fence} after ${granted.fence}`)
	assert.equal(await nextWithin(observer), null)
	// A second observer, started while someone leads: that leader first.
	const hold = gate()
	const holding = election.campaign('c:1', () => hold.opened)
	const c = await nextWithin(observer)
	assert.equal(c?.note, 'c:1')
	const late = election.observe()
	assert.deepEqual(await nextWithin(late), c)
	hold.open()
	await holding
	assert.equal(await nextWithin(observer), null)
	assert.equal(await nextWithin(late), null)
	await observer.return()
	await late.return()
})

test('observe survives CLIENT KILL of its connection: it observes again and yields the present leader again; a signal or return() ends it and closes its connection', async () => {
	const lock = shared.store.lock('elections', { ttl: '5s' })
	const election = lock.election('killed')
	const step = gate()
	const proclaimed = gate()
	const leading = election.campaign('before', async lead => {
		await step.opened
		await lead.proclaim('after')
		await proclaimed.opened
		return lead.fence
	})
	await until('a leader', async () => (await election.leader()) !== null)
	await using killer = await admin()
	// Every connection after this one is the observer's: its store's one connection.
	const mark = Number(await killer.send(['CLIENT', 'ID']))
	const own: Store = await connect(shared.server.address)
	try {
		const stop = new AbortController()
		const observer = own.lock('elections', { ttl: '5s' }).election('killed').observe({ signal: stop.signal })
		const first = await nextWithin(observer)
		assert.equal(first?.note, 'before')
		const [observing, ...others] = (await clientIds(killer)).filter(id => id > mark)
		assert.ok(observing !== undefined && others.length === 0, `the observer's connections: ${observing} ${others}`)
		await kill(killer, observing)
		assert.deepEqual(await nextWithin(observer), first, 'the present leader, again')
		const [again] = (await clientIds(killer)).filter(id => id > mark)
		assert.ok(again !== undefined && again > observing, `a new connection: ${again}`)
		step.open()
		assert.deepEqual(await nextWithin(observer), { ...first, note: 'after' })
		proclaimed.open()
		await leading
		assert.equal(await nextWithin(observer), null)
		// Aborting the signal ends the iteration, without an error, and closes the connection.
		const pending = observer.next()
		stop.abort()
		assert.deepEqual(await pending, { done: true, value: undefined })
		await until('the observer gone', async () => (await clientIds(killer)).filter(id => id > mark).length === 0)

		// return(), as `break` calls it, does the same.
		for await (const leader of own.lock('elections').election('killed').observe()) {
			assert.equal(leader, null)
			break
		}
		await until('the observer gone', async () => (await clientIds(killer)).filter(id => id > mark).length === 0)
	} finally {
		await own.close()
	}
})

test('observe ends when its store closes', async () => {
	const own = await connect(shared.server.address)
	const observer = own.lock('elections').election('closing').observe()
	assert.equal(await nextWithin(observer), null)
	const pending = observer.next()
	await own.close()
	assert.deepEqual(await pending, { done: true, value: undefined })
})

/** A campaigner program's line (see clients/testing/CAMPAIGNER.md), its integers as text to keep fences whole. */
type Line = { event: string; t: string; fence?: string | null; note?: string | null; kind?: string; text?: string; pid?: string }

/** Runs `dist/test/campaigner.js` against the shared server with `args`, its lines read as they come. */
function campaigner(args: string[]): { child: ChildProcess; lines: Line[] } {
	const program = fileURLToPath(new URL('./campaigner.js', import.meta.url))
	const child = spawn(process.execPath, [program, '--addr', shared.server.address, '--lock', 'campaigners', '--name', 'e', ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
	const lines: Line[] = []
	createInterface({ input: child.stdout! }).on('line', line => lines.push(JSON.parse(line.replace(/":\s*(\d+)/g, '":"$1"'))))
	return { child, lines }
}

test('the campaigner program: ready, elected, leading every 20 ms; the next elected with a greater fence once it is killed; the observer sees both, in order', async () => {
	const observer = campaigner(['--observe'])
	const a = campaigner(['--note', 'a', '--ttl-ms', '1000'])
	let b: ReturnType<typeof campaigner> | undefined
	try {
		await until('a elected, and leading three times', () => a.lines.filter(l => l.event === 'leading').length >= 3)
		b = campaigner(['--note', 'b', '--ttl-ms', '1000'])
		await until('b ready', () => b!.lines.some(l => l.event === 'ready'))
		const [ready, elected, ...leading] = a.lines
		assert.deepEqual([ready?.event, ready?.pid], ['ready', String(a.child.pid)])
		assert.equal(elected?.event, 'elected')
		assert.match(String(elected?.fence), /^\d+$/)
		for (const l of leading) assert.deepEqual([l.event, l.fence], ['leading', elected?.fence])
		const ts = a.lines.map(l => BigInt(l.t))
		assert.deepEqual(
			ts,
			[...ts].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)),
			'the clock only rises',
		)
		const killedAt = process.hrtime.bigint()
		a.child.kill('SIGKILL')
		await until('b elected', () => b!.lines.some(l => l.event === 'elected'), 5000)
		const bElected = b.lines.find(l => l.event === 'elected')!
		assert.ok(BigInt(String(bElected.fence)) > BigInt(String(elected?.fence)), `${bElected.fence} > ${elected?.fence}`)
		assert.ok(BigInt(bElected.t) - killedAt < 2_000_000_000n, 'elected within the ttl and a second')
		await until('the observer told', () => observer.lines.some(l => l.fence === bElected.fence))
		const observed = observer.lines.filter(l => l.event !== 'ready')
		assert.ok(
			observed.every(l => l.event === 'observed'),
			JSON.stringify(observed),
		)
		const leaders = observed.filter(l => l.fence !== null)
		assert.deepEqual([...new Set(leaders.map(l => l.fence))], [elected?.fence, bElected.fence])
		assert.deepEqual(
			leaders.map(l => l.note),
			leaders.map(l => (l.fence === elected?.fence ? 'a' : 'b')),
		)
	} finally {
		a.child.kill('SIGKILL')
		b?.child.kill('SIGKILL')
		observer.child.kill('SIGKILL')
	}
})

const CHECKER = path.join(REPO, 'clients/testing/election.py')

test("clients/testing/election.py passes with this client's campaigner", { skip: !fs.existsSync(CHECKER) && 'clients/testing/election.py is not there yet' }, async () => {
	const program = fileURLToPath(new URL('./campaigner.js', import.meta.url))
	const run = promisify(execFile)
	const { stdout, stderr } = await run('python3', [CHECKER, '--campaigner', `${process.execPath} ${program}`], {
		cwd: path.join(REPO, 'clients/typescript'),
		env: { ...process.env, HOLDLINE_BIN: holdlineBin() },
		timeout: 240_000,
	}).catch((e: { stdout?: string; stderr?: string; code?: unknown }) => {
		assert.fail(`election.py failed (${String(e.code)}):\n${e.stdout ?? ''}\n${e.stderr ?? ''}`)
	})
	assert.ok(stdout.length + stderr.length > 0, 'it said something')
})
