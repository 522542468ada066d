/**
 * `connect` and `Store`: a handle on one `holdline serve`, which opens
 * locks, reads a lock's counters, does fenced writes, and closes (also as
 * `await using store = await connect(...)`).
 */

import type * as tls from 'node:tls'
import { parseAddresses, resolveAuth } from './address.js'
import { toMillis, type Duration } from './duration.js'
import { debugString, errorFor } from './errors.js'
import { Lock, type LockOptions } from './lock.js'
import { request } from './request.js'
import { MAX_REPLY_BYTES } from './resp.js'
import { Router, routedRequest } from './router.js'

// `await using` looks `Symbol.asyncDispose` up when it runs; Node 20 before
// 20.4 lacks it. Define it only where missing, as the registered symbol
// later Node versions use, so every copy of this code and Node agree on it.
if (typeof Symbol.asyncDispose !== 'symbol') {
	Object.defineProperty(Symbol, 'asyncDispose', { value: Symbol.for('nodejs.asyncDispose') })
}

/** @internal How long dialling and `HELLO` may take unless `connectTimeout` says otherwise. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000

export interface ConnectOptions {
	/**
	 * The token, when the server was started with `--token-file` or
	 * `--users`. Given here, it wins over one in a `redis://:TOKEN@host`
	 * address.
	 */
	token?: string
	/**
	 * The user to connect as, on a server started with `--users` (1 to 64
	 * ASCII letters, digits or `_-.:@`; by default the address's
	 * `redis://USER:TOKEN@host`, else `default`). Given here, it wins over
	 * the address's. It needs a token: `HELLO 3 AUTH USER TOKEN` is said. A
	 * command naming a lock the user may not use fails `invalid` with
	 * `code: 'NOPERM'`.
	 */
	user?: string
	/**
	 * How long dialling and the handshake may take (default `'10s'`); also
	 * how long a store command (`stats`, `put`, `get`) may go unanswered. A
	 * server silent that long fails `connect` with `store: the server at
	 * HOST:PORT answered nothing for 10s: closed`.
	 */
	connectTimeout?: Duration
	/** Connections kept open for reuse while no hold uses them (default 8). */
	maxIdle?: number
	/**
	 * The largest reply a connection takes, in bytes (default 64 MiB). A
	 * reply whose header announces more ends its connection at once, before
	 * any of it is read: `store: the server at HOST:PORT announced a reply of
	 * N bytes, over the limit of LIMIT: closed` (at connect, `connect`
	 * rejects so).
	 */
	maxReplyBytes?: number
	/**
	 * Speak TLS, with these options of Node's `tls.connect` (`ca`, `cert`,
	 * `key`, `servername`, `rejectUnauthorized`, ...), whatever the
	 * address's form; `{}` trusts Node's default CAs. Without it only a
	 * `rediss://` address speaks TLS, trusting Node's default CAs. The host
	 * and port are always the address's.
	 */
	tls?: tls.ConnectionOptions
}

/** A lock's counters, as `STATS` answers them. */
export interface LockStats {
	live_keys: number
	held_keys: number
	waiters: number
	grants: number
	timeouts: number
	revocations: number
	expirations: number
}

/**
 * Connects to `holdline serve` at `address`: `host:port`, `host` (port
 * 7380), `[ipv6]:port` or `redis[s]://[[user]:token@]host[:port]`; by default
 * `127.0.0.1:7380`. Resolves once a first connection has said `HELLO`, so a
 * wrong address or token, or a failed TLS handshake, fails here, not at
 * the first hold.
 *
 * Several nodes of a cluster: addresses separated by commas, or a list of
 * them (the first one's user, token and TLS apply to all). They are tried in
 * order, the first that answers wins; none: the last one's error. A
 * cluster's map of slots is learned at once and each hold goes to the node
 * serving its key.
 */
export async function connect(address: string | readonly string[] = '127.0.0.1:7380', options: ConnectOptions = {}): Promise<Store> {
	const seeds = parseAddresses(address)
	const where = seeds[0]!
	const timeout = options.connectTimeout === undefined ? DEFAULT_CONNECT_TIMEOUT_MS : toMillis(options.connectTimeout, 'connectTimeout', 'store')
	const maxIdle = options.maxIdle ?? 8
	if (!Number.isSafeInteger(maxIdle) || maxIdle < 0) throw errorFor('invalid', `maxIdle is a count, not ${String(maxIdle)}`)
	const maxReplyBytes = options.maxReplyBytes ?? MAX_REPLY_BYTES
	if (!Number.isSafeInteger(maxReplyBytes) || maxReplyBytes < 1) {
		throw errorFor('invalid', `maxReplyBytes is a count of bytes, not ${String(maxReplyBytes)}`)
	}
	if (options.tls !== undefined && (typeof options.tls !== 'object' || options.tls === null)) {
		throw errorFor('invalid', `the tls option is an object of tls.connect options, not ${String(options.tls)}`)
	}
	const auth = resolveAuth(where, options.user, options.token)
	const tlsOptions = options.tls ?? (where.tls ? {} : undefined)
	return new Store(await Router.connect(seeds, { auth, tls: tlsOptions, connectTimeoutMs: Math.max(1, timeout), maxIdle, maxReplyBytes }))
}

/** The names a lock may have: 1 to 128 ASCII letters, digits and `_ - . :`. */
const LOCK_NAME = /^[A-Za-z0-9_.:-]{1,128}$/

export class Store implements AsyncDisposable {
	readonly #router: Router

	/** Made by `connect`. */
	constructor(router: Router) {
		this.#router = router
	}

	/** The server's address, `host:port` (of a cluster, the node `connect` reached). */
	get address(): string {
		return this.#router.address
	}

	/**
	 * Whether the server is a cluster's node (it answered `CLUSTER SLOTS`
	 * with a map at connect): each hold then goes to its key's node.
	 */
	get clustered(): boolean {
		return this.#router.clustered
	}

	/** How many `MOVED` answers this store followed (0 when the map it holds is right). */
	get redirects(): number {
		return this.#router.redirects
	}

	/** Whether `close` was called. */
	get closed(): boolean {
		return this.#router.closed
	}

	/**
	 * A handle on the lock `name`; its `ttl` (default `'10s'`) and `maxHold`
	 * (default off) apply to the holds made through it, and `permits`
	 * (default 1) is how many permits each of its keys has: a semaphore, or
	 * with exclusive holds a read-write lock. Throws `invalid` at once for a
	 * bad name or duration; a bad count fails the first hold, as the server
	 * words it.
	 */
	lock(name: string, options: LockOptions = {}): Lock {
		if (typeof name !== 'string' || !LOCK_NAME.test(name)) {
			const shown = typeof name === 'string' ? debugString(name) : String(name)
			throw errorFor('invalid', 'a lock name is 1 to 128 ASCII letters, digits and "_-.:"', shown)
		}
		if (this.#router.closed) throw errorFor('closed', 'the store is closed', name)
		return new Lock(this.#router, name, options)
	}

	/**
	 * The counters of the lock `name`. Of a cluster, the sums of every
	 * node's of the map: a node that cannot be reached, or fails, rejects
	 * the call with its error.
	 */
	async stats(name: string): Promise<LockStats> {
		const replies = await Promise.all(this.#router.nodePools().map(pool => request(pool, ['STATS', name], name)))
		const stats: Record<string, number> = {}
		const add = (k: unknown, v: unknown) => (stats[String(k)] = (stats[String(k)] ?? 0) + Number(v))
		for (const reply of replies) {
			if (reply instanceof Map) {
				for (const [k, v] of reply) add(k, v)
			} else if (Array.isArray(reply)) {
				for (let i = 0; i + 1 < reply.length; i += 2) add(reply[i], reply[i + 1])
			}
		}
		return stats as unknown as LockStats
	}

	/**
	 * The fenced write: sets `row` to `value` only while the key of the lock
	 * is held by the lease bearing `fence` (and no newer fence wrote the
	 * row); else rejects `lost`. A holder that stalled and was replaced is
	 * refused this way.
	 */
	async put(lock: string, key: string | number | bigint, fence: bigint, row: string, value: string): Promise<void> {
		await routedRequest(this.#router, ['PUT', lock, key, fence, row, value], String(key), lock)
	}

	/** The value of `row`, or `null` when it has none. */
	async get(row: string): Promise<string | null> {
		const reply = await routedRequest(this.#router, ['GET', row], row)
		return reply === null ? null : String(reply)
	}

	/**
	 * Closes every connection: holds still waiting reject `closed`, leases
	 * still held are lost (`its store closed`) and the server lets their
	 * keys go; every later call fails `closed`. Safe to call twice.
	 */
	async close(): Promise<void> {
		this.#router.close()
	}

	/** `close()`, for `await using store = await connect(...)`. */
	[Symbol.asyncDispose](): Promise<void> {
		return this.close()
	}
}
