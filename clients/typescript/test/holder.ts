/**
 * A holder in a process of its own, for the tests that kill or stop it:
 * `node holder.js ADDRESS LOCK KEY TTL`. It holds KEY and reports on stdout,
 * one JSON object a line: `held` (with the fence), `aborted` (with the
 * reason's kind and text) once its signal aborts, `put` (what a fenced write
 * with its old fence answered), and `rejected` (what `hold` rejected with).
 */

import { connect, HoldlineError } from '../src/index.js'
import { whenLost } from './server.js'

const [address, lockName, key, ttl] = process.argv.slice(2) as [string, string, string, string]
const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n')
const text = (e: unknown) => (e instanceof HoldlineError ? { kind: e.kind, message: e.message } : { message: String(e) })

const store = await connect(address)
try {
	await store.lock(lockName, { ttl }).hold(key, async lease => {
		say({ held: lease.fence.toString() })
		await whenLost(lease)
		say({ aborted: text(lease.signal.reason) })
		try {
			await store.put(lockName, key, lease.fence, `row-${key}`, 'from the stalled holder')
			say({ put: 'OK' })
		} catch (e) {
			say({ put: text(e) })
		}
	})
	say({ resolved: true })
} catch (e) {
	say({ rejected: text(e) })
}
await store.close()
