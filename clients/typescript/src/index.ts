/**
 * holdline for Node: keyed locks with leases, held through `holdline serve`:
 * `connect`, `store.lock(name, { ttl, maxHold, permits })`,
 * `lock.hold(key, fn, { wait, permits, exclusive })`, `lock.tryHold(key, fn)`,
 * `lock.inspect(key)`, `lock.election(name)` (`campaign`, `leader`,
 * `observe`), over TCP or TLS: the same calls as the Rust and
 * Python APIs.
 */

export { connect, Store, type ConnectOptions, type LockStats } from './store.js'
export { Lock, type Key, type LockOptions, type HoldOptions, type TryHoldOptions, type PermitOptions, type NoteOptions, type Tried } from './lock.js'
export { Election, Leadership, type Leader, type CampaignOptions, type ObserveOptions } from './election.js'
export { Lease, bigintsAsText } from './lease.js'
export type { KeyState, KeyHolder } from './inspect.js'
export { HoldlineError, type ErrorKind, type ErrorCode } from './errors.js'
export type { Duration } from './duration.js'
