/**
 * `Lock`: `hold` and `tryHold` of a named lock's keys over the server. A
 * hold asks on a connection of its own, runs the function once granted,
 * watches for the loss of its lease, and lets the key go when the function
 * settles. A lock of several permits per key is a semaphore (or, with
 * exclusive holds, a read-write lock): each hold takes some permits, as a
 * lease of its own.
 */

import { AsyncLocalStorage } from 'node:async_hooks'
import { randomBytes } from 'node:crypto'
import { showAddress } from './address.js'
import { ConnectionClosed, ConnectionSilent, type Connection, type Moved } from './connection.js'
import { HoldDeadline, pause, untilAborted } from './deadline.js'
import { lostMarginMs, now, toMillis, toPositiveMillis, waitGraceMs, type Duration } from './duration.js'
import { errorFor, fromServer, HoldlineError, showKey } from './errors.js'
import { keyState, type KeyState } from './inspect.js'
import { Lease, type LeaseClock, type LeaseLink } from './lease.js'
import { Election, type ElectionHold } from './election.js'
import type { Pool } from './pool.js'
import { CLUSTER_DOWN_PAUSE_MS, movedTarget, Redirects, routedRequest, type Router } from './router.js'
import { RespError, type Arg, type Reply } from './resp.js'
import { connectionClosedKey, lostConnection, lostSilent, reattachFailed, waitSilent } from './texts.js'

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
	/** Where the connection goes back once the key is let go (another node's, once the lease followed a hand-over). */
	pool: Pool
	/** The lease's connection: another one, to the new node, once the lease followed a hand-over. */
	connection: Connection
	lease: Lease
	/** Granted after its first deadline: to be confirmed by a RENEW before the function runs. */
	late: boolean
	/** The secret its HOLD or TRYHOLD carried, to re-attach with after a hand-over; `undefined` when its node cannot hand over. */
	secret: string | undefined
}

/** A granted lease's watch (`#watch`). */
interface Watch {
	/** Stops losing the lease when its connection closes: the key is being let go. */
	stopClose(): void
	/** Stops listening for the server's news of the lease. */
	stopLoss(): void
	/** Follows the lease to the node a hand-over moved it to (once at a time); ends when it re-attached there or was lost. */
	follow(moved: Moved): Promise<void>
	/** Ends once no re-attach is under way. */
	following(): Promise<void>
	/** Whether a re-attach is under way. */
	readonly moving: boolean
}

/** A hold's secret: 32 lowercase hex digits from the system's random source, new for each hold. */
function newSecret(): string {
	return randomBytes(16).toString('hex')
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
		// Sent only to a node that can hand over (`handover` in HELLO); the same for each send of this hold.
		const secret = newSecret()
		// A HOLD that waited with its secret was answered MOVED: its partition
		// was handed over, and it waits in its place there, to re-attach to.
		let reattach = false
		for (let sends = 0; ; sends++) {
			if (this.#router.closed) throw this.#storeClosed(key)
			deadline.signal.throwIfAborted()
			const pool = redirects.pool()
			let connection: Connection
			try {
				connection = await this.#connection(pool, key, deadline.signal)
			} catch (e) {
				// Re-attaching, a node that cannot be reached is the one that handed
				// over and left, named by a map not yet mended: asked again, after a pause.
				if (!reattach || deadline.signal.aborted || this.#router.closed) throw e
				await untilAborted(this.#router.refresh(), deadline.signal)
				await pause(CLUSTER_DOWN_PAUSE_MS, deadline.signal)
				continue
			}
			// Renew from now on: a lease is granted as alive as its connection's
			// last command, so the connection keeps talking while it waits too.
			connection.busy(this.#renewalPeriod)
			// The clock of a grant starts at the send of the HOLD granted, the last one sent.
			const sentAt = now()
			const withSecret = connection.handover
			const args: Arg[] = reattach ? ['REATTACH', this.name, key, secret] : command(sends === 0 ? waitMs : deadline.waitLeftMs())
			if (withSecret && !reattach) args.push('SECRET', secret)
			const reply = await this.#send(connection, args, key, deadline)
			if (connection.closed) {
				// Given up between the answer and now: the server let the key go.
				throw this.#askFailed(key, deadline.signal, undefined)
			}
			if (reply === null || reply instanceof RespError) {
				pool.giveBack(connection)
				if (reply === null) return null
				// Nothing handed over under the secret: the MOVED was the map's
				// (a node that never served the slot answers a HOLD so too), or the
				// transfer failed. Either way, HOLD again with the wait left.
				if (reattach && reply.word === 'LOST') {
					reattach = false
					continue
				}
				const handedOver = reply.word === 'MOVED' && withSecret && args[0] === 'HOLD'
				// A REATTACH answered MOVED: the partition is between owners for a moment (the new
				// one names the old until it serves it); sent on after the pause a CLUSTERDOWN gets.
				if (reattach && reply.word === 'MOVED') await pause(CLUSTER_DOWN_PAUSE_MS, deadline.signal)
				if (await redirects.follow(reply, deadline.signal)) {
					reattach ||= handedOver
					continue
				}
				throw fromServer(reply.word, reply.text)
			}
			if (!Array.isArray(reply) || typeof reply[0] !== 'bigint' || typeof reply[1] !== 'bigint') {
				connection.destroy()
				throw errorFor('invalid', `the server answered ${args[0]} with ${String(reply)}`, this.name, key)
			}
			const lease = new Lease(key, reply[1], reply[0], permits)
			const late = !this.#startClock(connection, lease, sentAt)
			return { pool, connection, lease, late, secret: connection.handover ? secret : undefined }
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
	async #confirm(grant: Grant, watch: Watch): Promise<boolean> {
		const { connection, lease } = grant
		let timer: NodeJS.Timeout | undefined
		const silent = new Promise<typeof SILENT>(resolve => {
			timer = setTimeout(() => resolve(SILENT), waitGraceMs(this.#ttlMs))
			timer.unref()
		})
		const sentAt = now()
		const renewed = connection.send(['RENEW', lease.id]).catch(() => CLOSED)
		const reply = await Promise.race([renewed, silent])
		clearTimeout(timer)
		// Handed over before it was confirmed (its push, or MOVED to the RENEW): a
		// REATTACH answers a lease only while it lives, so re-attaching confirms it.
		const target = reply instanceof RespError && reply.word === 'MOVED' && grant.secret !== undefined ? movedTarget(reply.text) : undefined
		// (A re-attach done already closed the old connection: the RENEW answered CLOSED.)
		if (target || watch.moving || grant.connection !== connection) {
			if (target) await watch.follow({ id: lease.id, slot: target.slot, address: showAddress(target.address) })
			await watch.following()
			return lease.clocked && !lease.lost
		}
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
		const { lease } = grant
		const watch = this.#watch(grant)
		let letGo: Promise<void> | undefined
		const link: LeaseLink = {
			// Where the lease is now: another node's connection once it followed a hand-over.
			send: args => grant.connection.send(args),
			letGo: () => (letGo ??= this.#letGo(grant, watch)),
		}
		const outcome = !grant.late || (await this.#confirm(grant, watch)) ? await this.#runFn(lease, link, fn) : undefined
		await link.letGo()
		grant.pool.giveBack(grant.connection)
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
	async #letGo(grant: Grant, watch: Watch): Promise<void> {
		const { lease } = grant
		// A re-attach under way ends first: the key is let go where the lease went.
		await watch.following()
		lease.settle()
		let released = await this.#release(grant, watch)
		// Moved meanwhile (its push read after the function ended): let it go where it went.
		const target = released instanceof RespError && released.word === 'MOVED' && grant.secret !== undefined ? movedTarget(released.text) : undefined
		if (target && !lease.lost) {
			await watch.follow({ id: lease.id, slot: target.slot, address: showAddress(target.address) })
			if (!lease.lost) released = await this.#release(grant, watch)
		}
		watch.stopLoss()
		if (released instanceof RespError) {
			const error = fromServer(released.word, released.text)
			if (error.kind === 'lost') lease.lose(error)
		}
	}

	/** `RELEASE` on the lease's connection, its renewal and close watch stopped first; `undefined` once that connection closed. */
	async #release({ connection, lease }: Grant, watch: Watch): Promise<Reply | undefined> {
		connection.onAnswer = undefined
		connection.stopRenewal()
		watch.stopClose()
		try {
			// A lease lost by the clock closed its connection: this fails, and the server lets the key go.
			return await connection.send(['RELEASE', lease.id])
		} catch {
			// The connection closed: the server let the key go with it.
			return undefined
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
	#watch(grant: Grant): Watch {
		const { lease } = grant
		let following: Promise<void> | undefined
		let watching: { stopClose(): void; stop(): void } | undefined
		// A move read with the grant, told while the watch starts: followed once it has.
		let early: Moved | undefined
		const follow = (moved: Moved): Promise<void> => {
			if (!watching) {
				early = moved
				return Promise.resolve()
			}
			// Once at a time; news of a lease id it no longer has (a RENEW answered late) changes nothing.
			if (following) return following
			if (moved.id !== lease.id || lease.lost) return Promise.resolve()
			watching.stop()
			following = this.#follow(grant, moved).then(
				connection => {
					if (connection) watching = this.#watchOn(connection, grant, follow)
				},
				() => {},
			)
			following = following.finally(() => (following = undefined))
			return following
		}
		watching = this.#watchOn(grant.connection, grant, follow)
		if (early) void follow(early)
		return {
			stopClose: () => watching?.stopClose(),
			stopLoss: () => watching?.stop(),
			follow,
			following: () => following ?? Promise.resolve(),
			get moving() {
				return following !== undefined
			},
		}
	}

	/**
	 * Watches the lease on `connection`: the server's `lost` and `moved`
	 * pushes, a RENEW every third of the ttl (answered LOST: lost; answered
	 * MOVED: moved, as a server tells a lease it handed over), and the
	 * connection closing.
	 */
	#watchOn(connection: Connection, { lease, secret }: Grant, follow: (moved: Moved) => void): { stopClose(): void; stop(): void } {
		const id = lease.id
		const stopLoss = connection.watchLoss(id, text => lease.lose(new HoldlineError('lost', text)))
		const stopMoved = secret === undefined ? () => {} : connection.watchMoved(id, follow)
		connection.busy(this.#renewalPeriod, () => {
			connection.send(['RENEW', id]).then(
				reply => {
					if (!(reply instanceof RespError)) return
					if (reply.word === 'LOST') lease.lose(fromServer(reply.word, reply.text))
					const target = reply.word === 'MOVED' && secret !== undefined ? movedTarget(reply.text) : undefined
					if (target) follow({ id, slot: target.slot, address: showAddress(target.address) })
				},
				() => {}, // closed: `onClose` below reports it
			)
		})
		const stopClose = connection.onClose(() => {
			if (lease.settled) return
			lease.lose(this.#router.closed ? errorFor('lost', 'its store closed', this.name, lease.key) : lostConnection(this.name, lease.key))
		})
		return {
			stopClose,
			stop: () => {
				stopClose()
				stopLoss()
				stopMoved()
			},
		}
	}

	/**
	 * Follows a lease that a planned hand-over moved to another node: its
	 * old connection renews it no more and its answers count for nothing;
	 * `REATTACH lock key secret` goes to the node named (following `MOVED`,
	 * pausing after `CLUSTERDOWN`, dialling again after a failure) until the
	 * lease's deadline. Its `[lease, fence]` answer: the lease goes on there,
	 * under the new id, its deadline counted from that REATTACH's send (if
	 * later), and the connection is answered. `LOST`, anything else, or the
	 * deadline first: the lease is lost (`reattach_failed`).
	 */
	async #follow(grant: Grant, moved: Moved): Promise<Connection | undefined> {
		const { lease } = grant
		const old = grant.connection
		old.onAnswer = undefined
		old.stopRenewal()
		const failed = () => reattachFailed(this.name, lease.key)
		const giveUp = new AbortController()
		// The deadline no longer moves (no connection renews the lease now): lost at it, unless re-attached first.
		const clock = { spanMs: this.#ttlMs - lostMarginMs(this.#ttlMs), lapsed: failed, onLapse: () => giveUp.abort() }
		// A late grant not yet confirmed (its function waits for that): a ttl from now to re-attach in.
		if (lease.clocked) lease.setClock(clock)
		else lease.startClock(now() + clock.spanMs, clock)
		const timer = setTimeout(() => giveUp.abort(), Math.max(1, Math.ceil(lease.deadline - now())))
		const { signal } = giveUp
		let connection: Connection | undefined
		try {
			connection = await this.#reattach(grant, moved, signal)
		} catch {
			// Given up (the deadline) or refused: lost below.
		} finally {
			clearTimeout(timer)
			old.destroy()
		}
		if (!connection || lease.lost) {
			connection?.destroy()
			lease.lose(failed())
			return undefined
		}
		return connection
	}

	/** `REATTACH` until it is answered a lease with the same fence (the connection, the lease re-attached on it) or `signal` aborts; throws otherwise. */
	async #reattach(grant: Grant, moved: Moved, signal: AbortSignal): Promise<Connection> {
		const { lease } = grant
		const target = movedTarget(`${moved.slot} ${moved.address}`)
		if (target) this.#router.moved(target.slot, target.address)
		for (;;) {
			signal.throwIfAborted()
			const pool = this.#router.poolFor(lease.key)
			let connection: Connection
			try {
				connection = await pool.take(undefined, signal)
			} catch {
				// Not reached (yet): the map asked again, and again after a pause.
				await untilAborted(this.#router.refresh(), signal)
				await pause(CLUSTER_DOWN_PAUSE_MS, signal)
				continue
			}
			connection.busy(this.#renewalPeriod)
			const sentAt = now()
			const onAbort = () => connection.destroy(new ConnectionClosed('the re-attach was given up'))
			signal.addEventListener('abort', onAbort, { once: true })
			let reply: Reply
			try {
				reply = await connection.send(['REATTACH', this.name, lease.key, grant.secret!])
			} catch {
				signal.throwIfAborted()
				await pause(CLUSTER_DOWN_PAUSE_MS, signal)
				continue
			} finally {
				signal.removeEventListener('abort', onAbort)
			}
			if (reply instanceof RespError) {
				pool.giveBack(connection)
				const next = reply.word === 'MOVED' ? movedTarget(reply.text) : undefined
				if (next) {
					// The partition between owners (the new one names the old until it
					// serves it), or a map to mend: sent on after a pause, until the deadline.
					this.#router.moved(next.slot, next.address)
					await pause(CLUSTER_DOWN_PAUSE_MS, signal)
					continue
				}
				if (reply.word === 'CLUSTERDOWN') {
					// The partition is between owners for a moment.
					await untilAborted(this.#router.refresh(), signal)
					await pause(CLUSTER_DOWN_PAUSE_MS, signal)
					continue
				}
				throw fromServer(reply.word, reply.text)
			}
			if (!Array.isArray(reply) || typeof reply[0] !== 'bigint' || reply[1] !== lease.fence) {
				connection.destroy()
				throw errorFor('invalid', `the server answered REATTACH with ${String(reply)}`, this.name, lease.key)
			}
			// Answered before the deadline: the new node holds the lease from the REATTACH's read on.
			lease.answered(sentAt)
			if (lease.lost) {
				// Answered too late: the clock lost it first.
				connection.destroy()
				throw lease.lostError
			}
			lease.reattached(reply[0])
			lease.setClock(this.#clock(connection, lease))
			connection.onAnswer = answeredSentAt => lease.answered(answeredSentAt)
			grant.connection = connection
			grant.pool = pool
			return connection
		}
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
