/**
 * `Election`: a leader chosen among campaigners, with etcd's shape, made of
 * a hold with a note and an observer. Campaigning holds the election's key
 * (its name, in the election's lock) with the candidate's note, waiting as
 * long as it takes; the leader is that lease's holder (its fence, its loss
 * signal, its note proclaimed with `NOTE`, its resignation a `RELEASE`);
 * `leader()` reads the key with `INSPECT`; `observe()` watches it with
 * `OBSERVE` on a connection of its own, which it opens again whenever it
 * breaks.
 */

import { ConnectionClosed, ConnectionSilent, type Connection } from './connection.js'
import { now, waitGraceMs } from './duration.js'
import { errorFor, fromServer, HoldlineError } from './errors.js'
import type { KeyState } from './inspect.js'
import type { Lease, LeaseLink } from './lease.js'
import { RespError, type Reply } from './resp.js'
import { Redirects, type Router } from './router.js'
import { connectionClosedKey, connectSilent, lostConnection, proclaimEnded } from './texts.js'

/** The leader of an election, as `leader()` and `observe()` see it. */
export interface Leader {
	/** Its note: what it campaigned with, or proclaimed since (`''` for a holder of the key that gave none). */
	note: string
	/** Its lease's fence (a `bigint`, as `lease.fence`): each new leader's is greater than every earlier one's. */
	fence: bigint
	/** How long it has led, in ms, when `leader()` asked; `null` from `observe()`, whose news does not say. */
	heldForMs: number | null
}

/** `campaign`'s options. */
export interface CampaignOptions {
	/** Aborting it while the campaign still waits takes it out of the line; `campaign` rejects with its reason. */
	signal?: AbortSignal
}

/** `observe`'s options. */
export interface ObserveOptions {
	/** Aborting it ends the observation: the iteration finishes (it does not throw) and its connection closes. */
	signal?: AbortSignal
}

/** What a lock lends the election it made (not exported by the package: `lock.election` makes elections). */
export interface ElectionHold {
	router: Router
	/** The lock's name. */
	lock: string
	/** The election's key, as text. */
	key: string
	/** The lock's ttl, in ms: the leader's lease's, and the scale of the observer's keep-alive. */
	ttlMs: number
	/** One `HOLD` of the key with `note`, waiting up to `waitMs`; `fn` runs under the lease, given its link. */
	hold<T>(note: string, waitMs: number, signal: AbortSignal | undefined, fn: (lease: Lease, link: LeaseLink) => T | PromiseLike<T>): Promise<T>
	/** `INSPECT` of the key. */
	inspect(): Promise<KeyState | null>
}

/** @internal How long one `HOLD` of a campaign waits; on `in use` the campaign sends another. */
export const CAMPAIGN_WAIT_MS = 60_000

/** @internal The pause before an observer tries again after a failure to observe, doubled each time up to `OBSERVE_PAUSE_MAX_MS`. */
export const OBSERVE_PAUSE_MIN_MS = 50
/** @internal The longest pause between an observer's tries. */
export const OBSERVE_PAUSE_MAX_MS = 1000

/**
 * An election: made by `lock.election(name)`. Its leader holds the key
 * `name` of the lock; the lock's ttl is the leader's lease's.
 */
export class Election {
	readonly #hold: ElectionHold

	/** Made by `lock.election(name)`. */
	constructor(hold: ElectionHold) {
		this.#hold = hold
	}

	/** The election's name: the key its leader holds. */
	get name(): string {
		return this.#hold.key
	}

	/** The name of the lock the election's key is in. */
	get lock(): string {
		return this.#hold.lock
	}

	/**
	 * Campaigns with `note` (1 to 1,024 bytes of UTF-8, no control
	 * characters: the candidate's address, say) and waits as long as it
	 * takes to be elected (until `signal` aborts); then runs `fn` as the
	 * leader, resigns once `fn` settles, and resolves with `fn`'s value. A
	 * rejection of `fn` propagates unchanged; a leadership lost while `fn`
	 * ran (`lead.signal` aborted, under the network rules of every hold)
	 * makes `campaign` reject with the `lost` error once `fn` resolves.
	 */
	async campaign<T>(note: string, fn: (lead: Leadership) => T | PromiseLike<T>, options: CampaignOptions = {}): Promise<T> {
		const { lock, key } = this.#hold
		if (typeof note !== 'string') throw errorFor('invalid', `a note is text, not ${typeof note}`, lock, key)
		if (typeof fn !== 'function') throw errorFor('invalid', `the leader is a function, not ${typeof fn}`, lock, key)
		for (;;) {
			let elected = false
			try {
				return await this.#hold.hold(note, CAMPAIGN_WAIT_MS, options.signal, async (lease, link) => {
					elected = true
					const lead = new Leadership(lease, link, note, lock)
					try {
						return await fn(lead)
					} finally {
						await lead.resign()
					}
				})
			} catch (e) {
				// Still held by another after the wait, or granted too late to be
				// confirmed (never run): stand in line again.
				if (!elected && e instanceof HoldlineError && (e.kind === 'in use' || e.kind === 'lost')) continue
				throw e
			}
		}
	}

	/**
	 * The leader now (`INSPECT`), or `null` when nobody holds the key. The
	 * answer is old the moment it arrives: for looking on, not for deciding
	 * who may act as leader (that is `lead.signal`'s and the fence's).
	 */
	async leader(): Promise<Leader | null> {
		const state = await this.#hold.inspect()
		const holder = state?.holder
		if (!state?.held || !holder) return null
		return { note: holder.note, fence: holder.fence, heldForMs: state.heldForMs }
	}

	/**
	 * The leader, then each change (`OBSERVE`, on a connection of its own):
	 * first the leader now or `null`; then a `Leader` for each new leader
	 * and each proclaim, and `null` when the leader's lease ends (released,
	 * expired, revoked, its connection closed). When the observing
	 * connection breaks (or goes silent for the lock's ttl, or the server
	 * says the observation is over) it connects again, observes again and
	 * yields the present leader (or `null`) again; so an item may repeat
	 * the one before it. It ends when `signal` aborts, when the loop is
	 * left (`break`, or the iterator's `return()`), or when the store
	 * closes; it throws what the server refuses (a RESP2 connection, a user
	 * who may not use the lock).
	 */
	async *observe(options: ObserveOptions = {}): AsyncGenerator<Leader | null, void, undefined> {
		const { signal } = options
		const { router } = this.#hold
		let pauseMs = 0
		while (!router.closed && !signal?.aborted) {
			let observing: { connection: Connection; feed: Feed }
			try {
				observing = await this.#observeOnce(signal)
			} catch (e) {
				if (router.closed || signal?.aborted) return
				if (!(e instanceof HoldlineError && e.kind === 'closed')) throw e
				pauseMs = Math.min(OBSERVE_PAUSE_MAX_MS, Math.max(OBSERVE_PAUSE_MIN_MS, pauseMs * 2))
				await pause(pauseMs, signal)
				continue
			}
			pauseMs = 0
			const { connection, feed } = observing
			try {
				for (;;) {
					// The process waits for news only while someone waits for it.
					connection.keepProcessAlive(true)
					const news = await feed.take(signal)
					connection.keepProcessAlive(false)
					if (news === ENDED || news === ABORTED) break
					yield news
				}
			} finally {
				connection.destroy(new ConnectionClosed('the observation ended'))
			}
			await pause(OBSERVE_PAUSE_MIN_MS, signal)
		}
	}

	/**
	 * Opens a connection to the node serving the key (following `MOVED`
	 * and `CLUSTERDOWN`) and sends `OBSERVE`: the connection, observing,
	 * and its news (`ENDED` once it closes or the server says the
	 * observation is over).
	 */
	async #observeOnce(signal: AbortSignal | undefined): Promise<{ connection: Connection; feed: Feed }> {
		const { router, lock, key, ttlMs } = this.#hold
		const redirects = new Redirects(router, lock, key)
		for (;;) {
			const pool = redirects.pool()
			if (pool.closed) throw errorFor('closed', 'the store is closed', lock, key)
			const connection = await pool.take()
			connection.keepProcessAlive(true)
			const feed = new Feed()
			const stop = () => connection.destroy(new ConnectionClosed('the observation was stopped'))
			signal?.addEventListener('abort', stop, { once: true })
			let leading: bigint | undefined
			connection.onObserve = items => {
				const [pushLock, pushKey, event, fence, , , note] = items
				if (pushLock !== lock || pushKey !== key) return
				if (event === 'held' || event === 'granted') {
					if (typeof fence !== 'bigint') return
					leading = fence
					feed.put({ note: typeof note === 'string' ? note : '', fence, heldForMs: null })
				} else if (event === 'free') {
					leading = undefined
					feed.put(null)
				} else if (event === 'closed') {
					// The store or partition closed: observe again, wherever the key is now served.
					connection.destroy(new ConnectionClosed('the server closed the observation'))
				} else if (typeof fence === 'bigint' && fence === leading) {
					// The end of the leader's lease: released, expired, revoked, disconnected.
					leading = undefined
					feed.put(null)
				}
			}
			connection.onClose(() => feed.put(ENDED))
			let reply: Reply
			try {
				reply = await sendWithin(connection, ['OBSERVE', lock, key], pool.connectTimeoutMs, pool.where, lock, key)
			} finally {
				signal?.removeEventListener('abort', stop)
			}
			if (reply instanceof RespError) {
				connection.destroy()
				if (await redirects.follow(reply)) continue
				throw fromServer(reply.word, reply.text)
			}
			if (reply !== 'OK') {
				connection.destroy()
				throw errorFor('invalid', `the server answered OBSERVE with ${String(reply)}`, lock, key)
			}
			keepAlive(connection, ttlMs)
			return { connection, feed }
		}
	}
}

/**
 * The leader of an election, while it leads: what `campaign` gives its
 * function. It leads while its lease lives: `signal` aborts the moment the
 * lease is lost (the server's news, its connection closing, or no answer
 * for the ttl less a margin), and the next campaigner is elected with a
 * greater fence.
 */
export class Leadership {
	readonly #lease: Lease
	readonly #link: LeaseLink
	readonly #lock: string
	readonly #controller = new AbortController()
	#note: string
	#resigned = false

	/** Made by `campaign`. */
	constructor(lease: Lease, link: LeaseLink, note: string, lock: string) {
		this.#lease = lease
		this.#link = link
		this.#note = note
		this.#lock = lock
		// Reading `lease.signal` looks at the clock first, and an abort reaches its listeners at once.
		const signal = lease.signal
		if (signal.aborted) this.#controller.abort(signal.reason)
		else signal.addEventListener('abort', () => this.#controller.abort(signal.reason), { once: true })
	}

	/** The fence of the leader's lease: greater than every earlier leader's; hand it to fenced writes. */
	get fence(): bigint {
		return this.#lease.fence
	}

	/** The leader's note: what it campaigned with, or last proclaimed. */
	get note(): string {
		return this.#note
	}

	/**
	 * Aborts once the leadership is over: with the `lost` error as its
	 * `reason` when the lease is lost, and with a `lost` error saying the
	 * leader resigned after `resign()` (or once `campaign`'s function
	 * settled). Reading it checks the clock first, as `lease.signal` does.
	 */
	get signal(): AbortSignal {
		void this.#lease.lost
		return this.#controller.signal
	}

	/** Whether the leader's lease has been lost (checks the clock first). */
	get lost(): boolean {
		return this.#lease.lost
	}

	/** Throws the `lost` error once the lease is lost; else does nothing. */
	check(): void {
		this.#lease.check()
	}

	/**
	 * Replaces the leader's note (`NOTE`): observers are told the leader
	 * again, with `note`. Rejects with the `lost` error once the lease is
	 * lost, `invalid` for a bad note (the server's words) or after the
	 * leader resigned.
	 */
	async proclaim(note: string): Promise<void> {
		const key = this.#lease.key
		if (typeof note !== 'string') throw errorFor('invalid', `a note is text, not ${typeof note}`, this.#lock, key)
		this.#lease.check()
		if (this.#resigned) throw proclaimEnded(this.#lock, key)
		let reply: Reply
		try {
			reply = await this.#link.send(['NOTE', this.#lease.id, note])
		} catch {
			// The connection closed: its watcher lost the lease before this runs.
			throw this.#lease.lostError ?? lostConnection(this.#lock, key)
		}
		if (reply instanceof RespError) {
			const error = fromServer(reply.word, reply.text)
			if (error.kind === 'lost') this.#lease.lose(error)
			throw error
		}
		this.#note = note
	}

	/**
	 * Steps down now (`RELEASE`): `signal` aborts, the key goes to the next
	 * campaigner, and `campaign` still resolves with its function's value
	 * (as it does this itself once the function settles). Resolves once
	 * the server let the key go (or the lease was lost already); calling it
	 * again answers the same.
	 */
	async resign(): Promise<void> {
		if (!this.#resigned) {
			this.#resigned = true
			// A lease lost by the clock already says so first: the leadership was lost, not resigned.
			void this.#lease.lost
			this.#controller.abort(errorFor('lost', 'the leader resigned', this.#lock, this.#lease.key))
		}
		await this.#link.letGo()
	}
}

/** The end of one observing connection's news. */
const ENDED = Symbol('ended')
/** What `Feed.take` answers once its signal aborted. */
const ABORTED = Symbol('aborted')
type News = Leader | null | typeof ENDED

/** One observing connection's news, kept in order until taken; nothing after `ENDED`. */
class Feed {
	#items: News[] = []
	#ended = false
	#wake: (() => void) | undefined

	put(news: News): void {
		if (this.#ended) return
		if (news === ENDED) this.#ended = true
		this.#items.push(news)
		this.#wake?.()
	}

	/** The oldest news, once there is some; `ABORTED` once `signal` aborts first. */
	async take(signal: AbortSignal | undefined): Promise<News | typeof ABORTED> {
		while (this.#items.length === 0) {
			if (signal?.aborted) return ABORTED
			await new Promise<void>(resolve => {
				const wake = () => {
					this.#wake = undefined
					signal?.removeEventListener('abort', wake)
					resolve()
				}
				this.#wake = wake
				signal?.addEventListener('abort', wake, { once: true })
			})
		}
		return this.#items.shift()!
	}
}

/** Waits `ms`, less once `signal` aborts; the timer keeps the process alive, as the observer it delays does. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
	if (signal?.aborted) return Promise.resolve()
	return new Promise(resolve => {
		const done = () => {
			clearTimeout(timer)
			signal?.removeEventListener('abort', done)
			resolve()
		}
		const timer = setTimeout(done, ms)
		signal?.addEventListener('abort', done, { once: true })
	})
}

/**
 * Sends a command that the server answers at once (`OBSERVE`); no answer
 * within `timeoutMs` closes the connection and fails `closed`, as does the
 * connection closing first.
 */
async function sendWithin(connection: Connection, args: string[], timeoutMs: number, where: string, lock: string, key: string): Promise<Reply> {
	let silent = false
	const timer = setTimeout(() => {
		silent = true
		connection.destroy(new ConnectionSilent('the server answered nothing'))
	}, timeoutMs)
	try {
		return await connection.send(args)
	} catch (cause) {
		if (silent) throw Object.assign(connectSilent(where, timeoutMs), { cause })
		throw Object.assign(connectionClosedKey(lock, key), { cause })
	} finally {
		clearTimeout(timer)
	}
}

/**
 * Keeps an observing connection known to be alive: a `PING` every third
 * of the ttl, and once nothing has been answered for that plus the ttl (at
 * least 1 s), the connection is taken for dead and closed. A tick that
 * comes late by as much (this process stalled) proves nothing of the link.
 */
function keepAlive(connection: Connection, ttlMs: number): void {
	const periodMs = Math.max(1, Math.floor(ttlMs / 3))
	const deadMs = periodMs + waitGraceMs(ttlMs)
	let lastTick = now()
	connection.busy(periodMs, () => {
		const tick = now()
		const late = tick - lastTick > deadMs
		lastTick = tick
		if (!late && tick - connection.lastAnswered > deadMs) {
			connection.destroy(new ConnectionSilent('the server answered nothing for a ttl'))
			return
		}
		// A failed PING means the connection closed; its close listener ends the feed.
		connection.send(['PING']).catch(() => {})
	})
}
