/**
 * `Lock`: `hold` and `tryHold` of a named lock's keys over the server. A
 * hold asks on a connection of its own, runs the function once granted,
 * watches for the loss of its lease, and lets the key go when the function
 * settles. A lock of several permits per key is a semaphore (or, with
 * exclusive holds, a read-write lock): each hold takes some permits, as a
 * lease of its own.
 */

import { AsyncLocalStorage } from 'node:async_hooks'
import { ConnectionClosed, ConnectionSilent, type Connection } from './connection.js'
import { HoldDeadline } from './deadline.js'
import { lostMarginMs, now, toMillis, toPositiveMillis, waitGraceMs, type Duration } from './duration.js'
import { errorFor, fromServer, HoldlineError, showKey } from './errors.js'
import { keyState, type KeyState } from './inspect.js'
import { Lease, type LeaseClock, type LeaseLink } from './lease.js'
import { Election, type ElectionHold } from './election.js'
import type { Pool } from './pool.js'
import { Redirects, routedRequest, type Router } from './router.js'
import { RespError, type Arg, type Reply } from './resp.js'
import { connectionClosedKey, lostConnection, lostSilent, waitSilent } from './texts.js'

/** A key: text, or a whole number (the same key as its decimal text). */
export type Key = string | number | bigint

export interface LockOptions {
	/** How long a lease lives past its last renewal (default `'10s'`). */
	ttl?: Duration
	/** The longest a lease may be held from its grant (default: off). */
	maxHold?: Duration
	/**
	 * How many permits each key has: at most this many are held at once,
	 * over all its leases (default 1, a plain lock; the server takes 1 to
	 * 1,000,000). The server fixes a lock's count while any key of it is
	 * held or waited for: a hold naming another count meanwhile fails
	 * `invalid`.
	 */
	permits?: number
}

/** How many of the key's permits a hold takes: one unless told. */
export interface PermitOptions {
	/** Take this many permits (default 1; 1 to the lock's count). */
	permits?: number
	/** Take all of the lock's permits: alone with the key (a writer of a read-write lock). Not with `permits`. */
	exclusive?: boolean
}

/** A note on the lease a hold takes. */
export interface NoteOptions {
	/**
	 * A note on the lease (1 to 1,024 bytes of UTF-8, no control
	 * characters: a leader's address, a job id), shown wherever the holder
	 * is: `inspect`'s holders, an election's observers, the server's
	 * `HISTORY` and page. A bad one is the server's to refuse (`invalid`).
	 */
	note?: string
}

export interface HoldOptions extends PermitOptions, NoteOptions {
	/**
	 * How long to stand in line before failing `in use` (default `'10s'`;
	 * `0`: do not wait), counted from the call: a `HOLD` sent again after a
	 * `MOVED` or a `CLUSTERDOWN` carries what is left of it.
	 */
	wait?: Duration
	/** Aborting it takes a hold that still waits out of the line; the hold rejects with its reason. */
	signal?: AbortSignal
}

export interface TryHoldOptions extends PermitOptions, NoteOptions {
	/** Aborting it before the answer comes makes the try reject with its reason. */
	signal?: AbortSignal
}

/** What `tryHold` answers. */
export type Tried<T> = { acquired: true; value: T } | { acquired: false }

const DEFAULT_TTL_MS = 10_000
const DEFAULT_WAIT_MS = 10_000

/** The holds running in the current async context, to refuse a hold inside a hold of the same key. */
interface Running {
	router: Router
	lock: string
	key: string
	lease: Lease
}
const runningHolds = new AsyncLocalStorage<readonly Running[]>()

interface Grant {
	/** Where the connection goes back once the key is let go. */
	pool: Pool
	connection: Connection
	lease: Lease
	/** Granted after its first deadline: to be confirmed by a RENEW before the function runs. */
	late: boolean
}

/** What a RENEW that confirms a late grant came to, when it came to no reply. */
const SILENT = Symbol('silent')
const CLOSED = Symbol('closed')

export class Lock {
	readonly #router: Router
	readonly #ttlMs: number
	readonly #maxHoldMs: number | undefined
	readonly #permits: number
	/** The lease options every HOLD and TRYHOLD of this handle carries. */
	readonly #leaseArgs: Arg[]

	/** Made by `store.lock(name, options)`. */
	constructor(
		router: Router,
		/** The lock's name. */
		readonly name: string,
		options: LockOptions,
	) {
		this.#router = router
		this.#ttlMs = options.ttl === undefined ? DEFAULT_TTL_MS : toPositiveMillis(options.ttl, 'ttl', name)
		this.#maxHoldMs = options.maxHold === undefined ? undefined : toPositiveMillis(options.maxHold, 'maxHold', name)
		// A bad count is the server's to refuse, in the words every client shares.
		this.#permits = options.permits ?? 1
		this.#leaseArgs = ['TTL', this.#ttlMs]
		if (this.#maxHoldMs !== undefined) this.#leaseArgs.push('MAXHOLD', this.#maxHoldMs)
		// Only when not 1: a server from before permits still serves plain locks.
		if (this.#permits !== 1) this.#leaseArgs.push('PERMITS', this.#permits)
	}

	/** How long a lease lives past its last renewal, in milliseconds. */
	get ttl(): number {
		return this.#ttlMs
	}

	/** The longest a lease may be held, in milliseconds, or `undefined` when off. */
	get maxHold(): number | undefined {
		return this.#maxHoldMs
	}

	/** How many permits each key of the lock has (1 unless given). */
	get permits(): number {
		return this.#permits
	}

	/**
	 * Waits in the key's line (up to `wait`, 10 s unless given), holds the key
	 * while `fn` runs, lets it go when `fn` settles, and answers what `fn`
	 * answered. A rejection of `fn` propagates unchanged; a lease lost while
	 * `fn` ran makes `hold` reject with the `lost` error once `fn` resolves.
	 * It takes one of the key's permits, `permits` of them, or all with
	 * `exclusive`; it is granted once they fit and nobody waits before it.
	 */
	async hold<T>(key: Key, fn: (lease: Lease) => T | PromiseLike<T>, options: HoldOptions = {}): Promise<T> {
		const text = this.#keyText(key)
		const wait = options.wait === undefined ? DEFAULT_WAIT_MS : toMillis(options.wait, 'wait', this.name, text)
		checkFunction(fn, this.name, text)
		const take = this.#take(options, text)
		if (this.#runningHere(text)) throw errorFor('invalid', 'hold inside a hold of the same key', this.name, text)
		// The caller's function is given the lease alone.
		return this.#hold(text, wait, take, options.note, options.signal, lease => fn(lease))
	}

	/** `hold` of a key in text, its options read: the function is given the lease and its link too. */
	async #hold<T>(key: string, wait: number, take: Take, note: string | undefined, signal: AbortSignal | undefined, fn: Holder<T>): Promise<T> {
		const command = (waitMs: number) => ['HOLD', this.name, key, 'WAIT', waitMs, ...this.#leaseArgs, ...take.args, ...noteArgs(note)]
		const grant = await this.#ask(command, key, wait, take.permits, signal)
		// HOLD answers a lease or an error, never a null.
		if (!grant) throw errorFor('invalid', 'the server answered HOLD with a null', this.name, key)
		return this.#run(grant, fn)
	}

	/**
	 * Runs `fn` only if the key is free: `{ acquired: true, value }` then, and
	 * `{ acquired: false }` without running `fn` when the key is held (also
	 * when this async context holds it already). Never waits. With several
	 * permits: acquired only when the permits asked fit now and nobody waits.
	 */
	async tryHold<T>(key: Key, fn: (lease: Lease) => T | PromiseLike<T>, options: TryHoldOptions = {}): Promise<Tried<T>> {
		const text = this.#keyText(key)
		checkFunction(fn, this.name, text)
		const take = this.#take(options, text)
		if (this.#runningHere(text)) return { acquired: false }
		const command = () => ['TRYHOLD', this.name, text, ...this.#leaseArgs, ...take.args, ...noteArgs(options.note)]
		const grant = await this.#ask(command, text, 0, take.permits, options.signal)
		if (!grant) return { acquired: false }
		return { acquired: true, value: await this.#run(grant, lease => fn(lease)) }
	}

	/**
	 * The key's state on the server (`INSPECT`): whether it is held, the
	 * fence, how long it has been held and its lease has left, the line's
	 * length, and its holders with their permits; `null` when the server keeps
	 * nothing for the key (never held, nobody waiting). It holds nothing and
	 * does not wait in the key's line; the answer is old the moment it
	 * arrives, so it is for looking on, not for deciding who may write.
	 */
	async inspect(key: Key): Promise<KeyState | null> {
		const text = this.#keyText(key)
		const reply = await routedRequest(this.#router, ['INSPECT', this.name, text], text, this.name, text)
		return keyState(reply, this.name, text)
	}

	/**
	 * The election `name` among this lock's holders: its key `name` of this
	 * lock, held by the leader (see `Election`). The lock's `ttl` and
	 * `maxHold` are the leader's lease's; a lock of several permits is
	 * campaigned for whole (`exclusive`), so one leader at a time still.
	 */
	election(name: Key): Election {
		const key = this.#keyText(name)
		const take = this.#take({ exclusive: this.#permits !== 1 }, key)
		const hold: ElectionHold = {
			router: this.#router,
			lock: this.name,
			key,
			ttlMs: this.#ttlMs,
			hold: (note, wait, signal, fn) => {
				if (this.#runningHere(key)) throw errorFor('invalid', 'hold inside a hold of the same key', this.name, key)
				return this.#hold(key, wait, take, note, signal, fn)
			},
			inspect: () => this.inspect(key),
		}
		return new Election(hold)
	}

	#keyText(key: Key): string {
		if (typeof key === 'string') return key
		if (typeof key === 'bigint' || (typeof key === 'number' && Number.isSafeInteger(key))) return key.toString()
		const shown = typeof key === 'number' ? String(key) : typeof key
		throw errorFor('invalid', `a key is text or a whole number, not ${shown}`, this.name)
	}

	/**
	 * The `TAKE` a hold sends (none for one permit, as before permits) and
	 * the permits its lease will hold. Counts out of range are the server's
	 * to refuse; asking for both a count and all of them is a caller's slip.
	 */
	#take(options: PermitOptions, key: string): Take {
		if (options.exclusive && options.permits !== undefined) {
			const both = `both permits (${String(options.permits)}) and exclusive given`
			throw new TypeError(`lock ${this.name}: key ${showKey(key)}: ${both}: a hold takes some permits or all ${this.#permits}, not both`)
		}
		if (options.exclusive) return { args: ['TAKE', 'ALL'], permits: this.#permits }
		const permits = options.permits ?? 1
		return { args: permits === 1 ? [] : ['TAKE', permits], permits }
	}

	#runningHere(key: string): boolean {
		const running = runningHolds.getStore()
		return !!running?.some(r => r.router === this.#router && r.lock === this.name && r.key === key && !r.lease.settled)
	}

	/**
	 * Sends HOLD or TRYHOLD on a connection of its own, to the node serving
	 * the key (again to another after a `MOVED` or `CLUSTERDOWN`): the
	 * grant, or `null` when TRYHOLD found the key held. The wait runs from
	 * this call and the whole of it is bounded (`HoldDeadline`): retries
	 * cannot stretch a hold past its call + wait + grace.
	 */
	async #ask(command: (waitMs: number) => Arg[], key: string, waitMs: number, permits: number, signal: AbortSignal | undefined): Promise<Grant | null> {
		const graceMs = waitGraceMs(this.#ttlMs)
		const deadline = new HoldDeadline(waitMs, graceMs, () => waitSilent(this.name, key, waitMs, graceMs), signal)
		try {
			return await this.#askWithin(command, key, waitMs, permits, deadline)
		} finally {
			deadline.end()
		}
	}

	/**
	 * `#ask` under its deadline. The first send carries the wait as given,
	 * each later one the wait left (whole milliseconds, 0 once spent).
	 */
	async #askWithin(command: (waitMs: number) => Arg[], key: string, waitMs: number, permits: number, deadline: HoldDeadline): Promise<Grant | null> {
		const redirects = new Redirects(this.#router, this.name, key)
		for (let sends = 0; ; sends++) {
			if (this.#router.closed) throw this.#storeClosed(key)
			deadline.signal.throwIfAborted()
			const pool = redirects.pool()
			const connection = await this.#connection(pool, key, deadline.signal)
			// Renew from now on: a lease is granted as alive as its connection's
			// last command, so the connection keeps talking while it waits too.
			connection.busy(this.#renewalPeriod)
			// The clock of a grant starts at the send of the HOLD granted, the last one sent.
			const sentAt = now()
			const args = command(sends === 0 ? waitMs : deadline.waitLeftMs())
			const reply = await this.#send(connection, args, key, deadline)
			if (connection.closed) {
				// Given up between the answer and now: the server let the key go.
				throw this.#askFailed(key, deadline.signal, undefined)
			}
			if (reply === null || reply instanceof RespError) {
				pool.giveBack(connection)
				if (reply === null) return null
				if (await redirects.follow(reply, deadline.signal)) continue
				throw fromServer(reply.word, reply.text)
			}
			if (!Array.isArray(reply) || typeof reply[0] !== 'bigint' || typeof reply[1] !== 'bigint') {
				connection.destroy()
				throw errorFor('invalid', `the server answered ${args[0]} with ${String(reply)}`, this.name, key)
			}
			const lease = new Lease(key, reply[1], reply[0], permits)
			return { pool, connection, lease, late: !this.#startClock(connection, lease, sentAt) }
		}
	}

	/** A connection of `pool` for a hold (none once `signal` aborted: a dial under way ends then). */
	async #connection(pool: Pool, key: string, signal: AbortSignal): Promise<Connection> {
		let connection: Connection
		try {
			connection = await pool.take(undefined, signal)
		} catch (e) {
			if (this.#router.closed) throw this.#storeClosed(key)
			throw e
		}
		if (signal.aborted) {
			pool.giveBack(connection)
			throw signal.reason
		}
		return connection
	}

	/**
	 * Starts the clock of a lease granted by a command sent at `sentAt`,
	 * unless the grant came after its first deadline (`false` then). The
	 * answers that arrived with the grant (PINGs sent while the HOLD waited)
	 * count: they arrived before that deadline.
	 */
	#startClock(connection: Connection, lease: Lease, sentAt: number): boolean {
		const clock = this.#clock(connection, lease)
		const first = sentAt + clock.spanMs
		if (now() >= first) return false
		lease.startClock(Math.max(first, connection.lastAnswered + clock.spanMs), clock)
		connection.onAnswer = answeredSentAt => lease.answered(answeredSentAt)
		return true
	}

	#clock(connection: Connection, lease: Lease): LeaseClock {
		return {
			spanMs: this.#ttlMs - lostMarginMs(this.#ttlMs),
			lapsed: () => lostSilent(this.name, lease.key, this.#ttlMs),
			// Never reuse a link that went silent; a server that comes back lets the key go at once.
			onLapse: () => connection.destroy(new ConnectionSilent('the server answered nothing for a ttl')),
		}
	}

	/**
	 * Confirms a grant that came after its first deadline (its HOLD waited
	 * about a ttl or more): answers that late prove nothing, but a RENEW
	 * answers OK only for a live lease. OK starts the clock from the RENEW's
	 * send; LOST, no answer within the ttl (1 s at least), an OK past the
	 * deadline it sets, or a closed connection lose the lease. Answers
	 * whether it was confirmed.
	 */
	async #confirm({ connection, lease }: Grant): Promise<boolean> {
		let timer: NodeJS.Timeout | undefined
		const silent = new Promise<typeof SILENT>(resolve => {
			timer = setTimeout(() => resolve(SILENT), waitGraceMs(this.#ttlMs))
			timer.unref()
		})
		const sentAt = now()
		const renewed = connection.send(['RENEW', lease.id]).catch(() => CLOSED)
		const reply = await Promise.race([renewed, silent])
		clearTimeout(timer)
		if (reply === 'OK' && this.#startClock(connection, lease, sentAt)) return true
		// An OK that came after the deadline it would set proves nothing more than silence.
		if (reply === SILENT || reply === 'OK') {
			lease.lose(lostSilent(this.name, lease.key, this.#ttlMs))
			connection.destroy(new ConnectionSilent('the server answered nothing for a ttl'))
		} else if (reply instanceof RespError && reply.word === 'LOST') {
			lease.lose(fromServer(reply.word, reply.text))
		} else if (reply !== CLOSED) {
			// The lease's state is unknown: closing lets the key go.
			lease.lose(errorFor('invalid', `the server answered RENEW with ${String(reply)}`, this.name, lease.key))
			connection.destroy()
		}
		// CLOSED: the connection's close watcher lost the lease.
		return false
	}

	/**
	 * Sends HOLD or TRYHOLD and awaits its answer. The hold given up (its
	 * caller's signal, or its deadline passed: the link taken for dead)
	 * closes the connection, which takes the HOLD out of its line, and a
	 * grant sent on it later is never read.
	 */
	async #send(connection: Connection, command: Arg[], key: string, deadline: HoldDeadline): Promise<Reply> {
		const { signal } = deadline
		const onAbort = () => connection.destroy(deadline.silent ? new ConnectionSilent('the server answered nothing for the wait') : new ConnectionClosed('the hold was aborted'))
		signal.addEventListener('abort', onAbort, { once: true })
		try {
			return await connection.send(command)
		} catch (e) {
			throw this.#askFailed(key, signal, e)
		} finally {
			signal.removeEventListener('abort', onAbort)
		}
	}

	#askFailed(key: string, signal: AbortSignal | undefined, cause: unknown): unknown {
		if (signal?.aborted) return signal.reason
		if (this.#router.closed) return this.#storeClosed(key)
		return Object.assign(connectionClosedKey(this.name, key), { cause })
	}

	#storeClosed(key: string): HoldlineError {
		return errorFor('closed', 'the store is closed', this.name, key)
	}

	/** Every third of the ttl, as Redisson's watchdog does. */
	get #renewalPeriod(): number {
		return Math.max(1, Math.floor(this.#ttlMs / 3))
	}

	/**
	 * Runs `fn` under a granted lease, then lets the key go (unless `fn` let
	 * it go already, through its link).
	 */
	async #run<T>(grant: Grant, fn: Holder<T>): Promise<T> {
		const { pool, connection, lease } = grant
		const watch = this.#watch(grant)
		let letGo: Promise<void> | undefined
		const link: LeaseLink = {
			send: args => connection.send(args),
			letGo: () => (letGo ??= this.#letGo(grant, watch)),
		}
		const outcome = !grant.late || (await this.#confirm(grant)) ? await this.#runFn(lease, link, fn) : undefined
		await link.letGo()
		pool.giveBack(connection)
		if (outcome && !outcome.ok) throw outcome.error
		const lost = lease.lostError
		if (lost) throw lost
		// Unconfirmed leases are lost, so this is only for the type checker.
		if (!outcome) throw errorFor('lost', 'its grant was not confirmed', this.name, lease.key)
		return outcome.value
	}

	/**
	 * Lets a granted lease's key go: the lease settled (its clock and loss
	 * watch stopped), then `RELEASE`. A `LOST` answer loses the lease: the
	 * loss raced the function's end (its push was still on the way).
	 */
	async #letGo({ connection, lease }: Grant, watch: { stopClose(): void; stopLoss(): void }): Promise<void> {
		lease.settle()
		connection.onAnswer = undefined
		connection.stopRenewal()
		watch.stopClose()
		let released: Reply | undefined
		try {
			// A lease lost by the clock closed its connection: this fails, and the server lets the key go.
			released = await connection.send(['RELEASE', lease.id])
		} catch {
			// The connection closed: the server let the key go with it.
		}
		watch.stopLoss()
		if (released instanceof RespError) {
			const error = fromServer(released.word, released.text)
			if (error.kind === 'lost') lease.lose(error)
		}
	}

	/** Runs the holder's function, marked as running in its async context. */
	async #runFn<T>(lease: Lease, link: LeaseLink, fn: Holder<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
		const running: Running = { router: this.#router, lock: this.name, key: lease.key, lease }
		try {
			const value = await runningHolds.run([...(runningHolds.getStore() ?? []), running], () => fn(lease, link))
			return { ok: true, value }
		} catch (error) {
			return { ok: false, error }
		}
	}

	/**
	 * Watches a granted lease for its loss: the server's push, a RENEW
	 * answered LOST (as a server that does not push tells it), its
	 * connection closing. The clock runs from the grant (see `Lease`).
	 */
	#watch({ connection, lease }: Grant): { stopClose(): void; stopLoss(): void } {
		const stopLoss = connection.watchLoss(lease.id, text => lease.lose(new HoldlineError('lost', text)))
		connection.busy(this.#renewalPeriod, () => {
			connection.send(['RENEW', lease.id]).then(
				reply => {
					if (reply instanceof RespError && reply.word === 'LOST') lease.lose(fromServer(reply.word, reply.text))
				},
				() => {}, // closed: `onClose` below reports it
			)
		})
		const stopClose = connection.onClose(() => {
			if (lease.settled) return
			lease.lose(this.#router.closed ? errorFor('lost', 'its store closed', this.name, lease.key) : lostConnection(this.name, lease.key))
		})
		return { stopClose, stopLoss }
	}
}

/** What a hold runs: the caller's function, given the lease (and, for an election, the lease's link). */
type Holder<T> = (lease: Lease, link: LeaseLink) => T | PromiseLike<T>

/** What a hold takes of the key's permits: the `TAKE` it sends and the permits its lease holds. */
interface Take {
	args: Arg[]
	permits: number
}

/** `NOTE text` for a hold given a note; nothing otherwise (a server from before notes still serves holds without one). */
function noteArgs(note: string | undefined): Arg[] {
	return note === undefined ? [] : ['NOTE', note]
}

function checkFunction(fn: unknown, lock: string, key: string): void {
	if (typeof fn !== 'function') throw errorFor('invalid', `the holder is a function, not ${typeof fn}`, lock, key)
}
