/**
 * A holder in a process of its own, for the tests that kill or stop it:
 * `node holder.js ADDRESS LOCK KEY TTL`. It holds KEY and reports on stdout,
 * one JSON object a line: `held` (with the fence), `aborted` (with the
 * reason's kind and text) once its signal aborts, `put` (what a fenced write
 * with its old fence answered), and `rejected` (what `hold` rejected with).
 */

import { connect } from '../src/index.js'
import { errorReport, report } from './child.js'
import { whenLost } from './server.js'

const [address, lockName, key, ttl] = process.argv.slice(2) as [string, string, string, string]

const store = await connect(address)
try {
	await store.lock(lockName, { ttl }).hold(key, async lease => {
		report({ held: lease.fence.toString() })
		await whenLost(lease)
		report({ aborted: errorReport(lease.signal.reason) })
		try {
			await store.put(lockName, key, lease.fence, `row-${key}`, 'from the stalled holder')
			report({ put: 'OK' })
		} catch (e) {
			report({ put: errorReport(e) })
		}
	})
	report({ resolved: true })
} catch (e) {
	report({ rejected: errorReport(e) })
}
await store.close()
