/**
 * The campaigner program that `clients/testing/election.py` drives (see
 * clients/testing/CAMPAIGNER.md):
 *
 *     node dist/test/campaigner.js --addr HOST:PORT --lock LOCK --name ELECTION --note NOTE --ttl-ms T
 *     node dist/test/campaigner.js --addr HOST:PORT --lock LOCK --name ELECTION --observe
 *
 * It campaigns forever (elected, `leading` every 20 ms while its
 * leadership is not lost, `lost`, then again), or observes forever, and
 * says so one JSON object a line on stdout, `t` being CLOCK_MONOTONIC in
 * nanoseconds (`process.hrtime.bigint()`).
 */

import { parseArgs } from 'node:util'
import { connect, HoldlineError, type Election } from '../src/index.js'

const { values } = parseArgs({
	options: {
		addr: { type: 'string' },
		lock: { type: 'string' },
		name: { type: 'string' },
		note: { type: 'string' },
		'ttl-ms': { type: 'string' },
		observe: { type: 'boolean', default: false },
	},
	strict: true,
})

if (values.addr === undefined || values.lock === undefined || values.name === undefined || (!values.observe && values.note === undefined)) {
	process.stderr.write('usage: campaigner.js --addr HOST:PORT --lock LOCK --name ELECTION (--note NOTE [--ttl-ms T] | --observe)\n')
	process.exit(2)
}

/** A JSON value of a line: big integers (fences, times) written whole, as JSON allows and `JSON.stringify` cannot. */
type Field = string | number | bigint | null

/** Prints one line: `{"event": EVENT, "t": T, ...fields}`. Writes to a pipe are synchronous on Linux: nothing waits in a buffer. */
function say(event: string, fields: Record<string, Field> = {}, t = process.hrtime.bigint()): void {
	const all: Record<string, Field> = { event, t, ...fields }
	const parts = Object.entries(all).map(([k, v]) => `${JSON.stringify(k)}: ${typeof v === 'bigint' ? v.toString() : JSON.stringify(v)}`)
	process.stdout.write(`{${parts.join(', ')}}\n`)
}

const sleep = (ms: number) => new Promise<void>(resolve => setTimeout(resolve, ms))

const store = await connect(values.addr)
const ttl = values['ttl-ms'] === undefined ? undefined : Number(values['ttl-ms'])
const election: Election = store.lock(values.lock, ttl === undefined ? {} : { ttl }).election(values.name)
say('ready', { pid: process.pid })

if (values.observe) {
	for await (const leader of election.observe()) {
		say('observed', leader ? { fence: leader.fence, note: leader.note } : { fence: null, note: null })
	}
} else {
	const note = values.note!
	for (;;) {
		let sawLoss = false
		try {
			await election.campaign(note, async lead => {
				say('elected', { fence: lead.fence })
				for (;;) {
					await sleep(20)
					const t = process.hrtime.bigint()
					if (lead.lost) {
						sawLoss = true
						say('lost', { fence: lead.fence })
						return
					}
					say('leading', { fence: lead.fence }, t)
				}
			})
		} catch (e) {
			// The loss it printed already rejects the campaign: that is no error of its own.
			if (!(sawLoss && e instanceof HoldlineError && e.kind === 'lost')) {
				const kind = e instanceof HoldlineError ? e.kind : 'error'
				say('error', { kind, text: e instanceof Error ? e.message : String(e) })
				await sleep(100)
			}
		}
	}
}
