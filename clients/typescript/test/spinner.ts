/**
 * A holder whose event loop never turns while it looks at its leases, for
 * the test of a process stopped past its ttl: `node spinner.js ADDRESS LOCK
 * TTL`. It holds keys a, b and c, then looks at the three leases in a loop
 * that never yields, so no timer and no reply can run between two looks: a
 * lease that reads lost there was found lost from the clock. It says
 * `spinning` after its first round of looks, so a stop lands between looks.
 * Once each lease has read lost it reports, for each, the time from just
 * before its last look that read not lost to just after its first look
 * that read lost (`gapsMs`, a stop in between included) and the reasons;
 * then `rejected` (what `hold` rejected with).
 */

import { connect, type Lease } from '../src/index.js'
import { errorReport, report } from './child.js'

const [address, lockName, ttl] = process.argv.slice(2) as [string, string, string]

function spin(a: Lease, b: Lease, c: Lease): void {
	// The three ways to look: the lost property, the signal, check().
	const looks = [() => a.lost, () => b.signal.aborted, () => throws(() => c.check())]
	const before = looks.map(() => performance.now())
	const gapsMs: Array<number | undefined> = looks.map(() => undefined)
	for (let said = false; gapsMs.includes(undefined); ) {
		looks.forEach((look, i) => {
			if (gapsMs[i] !== undefined) return
			const start = performance.now()
			if (look()) gapsMs[i] = performance.now() - before[i]!
			else before[i] = start
		})
		if (!said) {
			report({ spinning: true })
			said = true
		}
	}
	report({ gapsMs, reasons: [a, b, c].map(l => errorReport(l.signal.reason)) })
}

function throws(f: () => void): boolean {
	try {
		f()
		return false
	} catch {
		return true
	}
}

const store = await connect(address)
const lock = store.lock(lockName, { ttl })
try {
	await lock.hold('a', a => lock.hold('b', b => lock.hold('c', c => spin(a, b, c))))
	report({ resolved: true })
} catch (e) {
	report({ rejected: errorReport(e) })
}
await store.close()
