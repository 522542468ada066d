/**
 * What `INSPECT lock key` answers: one key's state on the server, read
 * without taking part in it. For operators and tests, not for deciding
 * who holds a key: the answer is old the moment it arrives.
 */

import { errorFor, type HoldlineError } from './errors.js'
import type { Reply } from './resp.js'

/** A lease holding a key, and its connection, as the server knows them. */
export interface KeyHolder {
	/** The server's id of the connection, as `CLIENT LIST` shows it and `CLIENT KILL ID` takes it. */
	id: number
	/** The connection's `CLIENT SETNAME`, or `null` when it has none. */
	name: string | null
	/** The connection's address as the server sees it, `ip:port`. */
	addr: string
	/** The lease's id on that connection. */
	lease: number
	/** The lease's fence (a `bigint`, as `lease.fence`). */
	fence: bigint
	/** How many of the key's permits the lease holds. */
	permits: number
	/** The lease's note (`hold`'s `note` option, a leader's proclaim); `''` when it has none (or the server keeps no notes). */
	note: string
}

/** One key of a lock, as `lock.inspect(key)` finds it. */
export interface KeyState {
	/** Whether the key has a holder (`holders > 0`). */
	held: boolean
	/** The highest fence among the current holders; the latest grant's while free (a `bigint`, as `lease.fence`). */
	fence: bigint
	/** How long the longest-held current lease has been held, in ms; `null` when not held (or unknown). */
	heldForMs: number | null
	/** How long the longest-held current lease lives unless renewed (or until its maxHold), in ms; `null` when not held (or unknown). */
	leaseLeftMs: number | null
	/** How many holds wait in the key's line, the holders not counted. */
	waiters: number
	/** The oldest current holder; `null` while nobody holds the key. */
	holder: KeyHolder | null
	/** How many leases hold the key (more than 1 only for a lock of several permits). */
	holders: number
	/** How many of the key's permits its holders hold in all. */
	permitsHeld: number
	/** Every current holder, the oldest grant first. */
	holderList: KeyHolder[]
}

/**
 * `INSPECT`'s answer: `null` for a null (the server keeps nothing for the
 * key), else its map (or the flat array of a RESP2 map) as a `KeyState`.
 * Fields the server may add later are skipped; a missing or mistyped one
 * fails `invalid`. A server from before permits sends no `holders`,
 * `permits_held` nor `holder_list`, and no holder's `fence` or `permits`:
 * its one holder holds the one permit under the key's fence. A server
 * from before notes sends no holder's `note`: it reads as `''`.
 */
export function keyState(reply: Reply, lock: string, key: string): KeyState | null {
	if (reply === null) return null
	const bad = () => errorFor('invalid', `the server answered INSPECT with ${show(reply)}`, lock, key)
	const fields = fieldsOf(reply) ?? throwIt(bad())
	const held = fields.get('held')
	const fence = fields.get('fence')
	if (typeof held !== 'boolean' || typeof fence !== 'bigint') throw bad()
	const holderAt = (r: Reply) => holderOf(fieldsOf(r) ?? throwIt(bad()), fence) ?? throwIt(bad())
	const holderReply = fields.get('holder') ?? null
	const holder = holderReply === null ? null : holderAt(holderReply)
	const listReply = fields.get('holder_list') ?? (holder ? [holderReply] : [])
	const holderList = Array.isArray(listReply) ? listReply.map(holderAt) : throwIt(bad())
	const heldForMs = millis(fields.get('held_for_ms'))
	const leaseLeftMs = millis(fields.get('lease_left_ms'))
	const waiters = count(fields.get('waiters'))
	const holders = fields.has('holders') ? count(fields.get('holders')) : holderList.length
	const permitsHeld = fields.has('permits_held') ? count(fields.get('permits_held')) : holderList.reduce((n, h) => n + h.permits, 0)
	if (heldForMs === undefined || leaseLeftMs === undefined || waiters === undefined || holders === undefined || permitsHeld === undefined) throw bad()
	return { held, fence, heldForMs, leaseLeftMs, waiters, holder, holders, permitsHeld, holderList }
}

/** A holder's map; `undefined` when a field is missing or mistyped. `keyFence`: its fence when the map has none. */
function holderOf(fields: Map<string, Reply>, keyFence: bigint): KeyHolder | undefined {
	const id = count(fields.get('id'))
	const lease = count(fields.get('lease'))
	const name = fields.get('name') ?? null
	const addr = fields.get('addr')
	const fence = fields.get('fence') ?? keyFence
	const permits = fields.has('permits') ? count(fields.get('permits')) : 1
	const note = fields.get('note') ?? ''
	if (typeof note !== 'string') return undefined
	if (id === undefined || lease === undefined || typeof addr !== 'string' || (name !== null && typeof name !== 'string')) return undefined
	if (typeof fence !== 'bigint' || permits === undefined) return undefined
	return { id, name, addr, lease, fence, permits, note }
}

/** A RESP3 map, or a RESP2 flat array of names and values, by name. */
function fieldsOf(reply: Reply): Map<string, Reply> | undefined {
	if (reply instanceof Map) return new Map([...reply].map(([k, v]) => [String(k), v]))
	if (!Array.isArray(reply) || reply.length % 2 !== 0) return undefined
	const fields = new Map<string, Reply>()
	for (let i = 0; i < reply.length; i += 2) fields.set(String(reply[i]), reply[i + 1]!)
	return fields
}

/** A whole number that fits a `number`; `undefined` otherwise. */
function count(value: Reply | undefined): number | undefined {
	if (typeof value !== 'bigint' || value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) return undefined
	return Number(value)
}

/** Milliseconds, `null` for a null or absent field; `undefined` for anything else. */
function millis(value: Reply | undefined): number | null | undefined {
	return value === null || value === undefined ? null : count(value)
}

function show(reply: Reply): string {
	return reply instanceof Map ? 'a map without its fields' : Array.isArray(reply) ? 'an array' : String(reply)
}

function throwIt(error: HoldlineError): never {
	throw error
}
