/**
 * `Lease`: what a holder's function is given: the key, the fence, the
 * permits it holds, and a signal that aborts the moment the lease is lost,
 * from the server's news or from the clock.
 *
 * The clock: the server keeps a lease at least a ttl past the last command
 * it read from the lease's connection while the lease was alive. The lease
 * here has a deadline never later than the server's end of it: it starts a
 * ttl (less a margin for this process's timer lateness) after the send of
 * the `HOLD`; an answer that arrives before the deadline, to a command sent
 * at `t`, moves it to `t + ttl - margin` if that is later; an answer that
 * arrives after it moves nothing (the server may have read that command
 * after the lease ended), so a passed deadline is final. A timer aborts the
 * signal at the deadline; and since a stopped process runs no timer,
 * `lost`, `check()` and `signal` each read the clock themselves first, so
 * the first look after a stall already answers lost.
 */

import { now, timerMs } from './duration.js'
import type { HoldlineError } from './errors.js'
import type { Arg, Reply } from './resp.js'

/** @internal What the lease's clock needs from its hold. */
export interface LeaseClock {
	/** The ttl less the margin: how long past a command's send its answer keeps the lease. */
	spanMs: number
	/** The `lost` error for a lease whose deadline passed. */
	lapsed(): HoldlineError
	/** Called once, after the lease was lost by the clock (closes its connection). */
	onLapse(): void
}

/**
 * What a hold lends its function besides the lease (an election's leader;
 * not exported by the package): commands on the lease's connection, and
 * letting the key go before the function ends.
 */
export interface LeaseLink {
	/** Sends a command on the lease's connection (`NOTE`); rejects once that connection closed. */
	send(args: readonly Arg[]): Promise<Reply>
	/** Settles the lease and sends `RELEASE` (once; later calls answer the same promise); the hold sends none after the function. */
	letGo(): Promise<void>
}

export class Lease {
	readonly #controller = new AbortController()
	#settled = false
	#clock: LeaseClock | undefined
	#deadline = 0
	#timer: NodeJS.Timeout | undefined
	#id: bigint

	/** Made by `hold` and `tryHold`. */
	constructor(
		/** The key, as text (a number key is its decimal text). */
		readonly key: string,
		/**
		 * The fencing token: strictly greater than every earlier grant's of
		 * this key. A `bigint`, since fences reach far past 2^53.
		 */
		readonly fence: bigint,
		/** The server's id of this lease. */
		id: bigint,
		/**
		 * How many of the key's permits this lease holds: what the hold asked
		 * (1 unless it said `permits`), the lock's count for `exclusive`.
		 */
		readonly permits = 1,
	) {
		this.#id = id
	}

	/** @internal The server's id of this lease: a new one once it re-attached on another node after a hand-over. */
	get id(): bigint {
		return this.#id
	}

	/** @internal Re-attached on another node, which knows the lease by `id`. */
	reattached(id: bigint): void {
		this.#id = id
	}

	/** @internal Whether its clock runs: a late grant's starts once confirmed. */
	get clocked(): boolean {
		return this.#clock !== undefined
	}

	/** @internal The local deadline: lost at it unless answers move it. */
	get deadline(): number {
		return this.#deadline
	}

	/**
	 * Aborts, with the `lost` error as its `reason`, once the lease is lost.
	 * Reading this property checks the clock first, so after a stall
	 * `lease.signal.aborted` is already true; a signal kept in a variable
	 * is aborted by a timer, on the event loop's first turn after a stall.
	 */
	get signal(): AbortSignal {
		this.#look()
		return this.#controller.signal
	}

	/** Whether the lease has been lost (its signal aborted); checks the clock first. */
	get lost(): boolean {
		this.#look()
		return this.#controller.signal.aborted
	}

	/**
	 * What `JSON.stringify(lease)` writes: the key, the fence as decimal
	 * text (JSON has no bigint, and a number would round it past 2^53),
	 * the permits and whether it is lost. For logs; compare fences as the
	 * `bigint` of `lease.fence`, never as this text.
	 */
	toJSON(): { key: string; fence: string; permits: number; lost: boolean } {
		return { key: this.key, fence: this.fence.toString(), permits: this.permits, lost: this.lost }
	}

	/** Throws the `lost` error once the lease is lost; else does nothing. */
	check(): void {
		if (this.lost) throw this.#controller.signal.reason
	}

	/** @internal Whether the holder's function has settled: a later close
	 * of the connection is the key being let go, not a loss. */
	get settled(): boolean {
		return this.#settled
	}

	/** @internal The function settled: a last look at the clock, then no more. */
	settle(): void {
		this.#look()
		this.#settled = true
		clearTimeout(this.#timer)
	}

	/**
	 * @internal Marks the lease lost; the first reason stays. The clock is
	 * read first: news that arrives after the deadline (a stopped process
	 * reads it late) finds the lease lost by the clock already.
	 */
	lose(error: HoldlineError): void {
		this.#look()
		this.#abort(error)
	}

	/** @internal The `lost` error, once lost. */
	get lostError(): HoldlineError | undefined {
		return this.lost ? (this.#controller.signal.reason as HoldlineError) : undefined
	}

	/** @internal Starts the clock: from now on the lease is lost at `deadline` unless answers move it. */
	startClock(deadline: number, clock: LeaseClock): void {
		this.#clock = clock
		this.#deadline = deadline
		this.#arm()
	}

	/**
	 * @internal What a lapse is and does from now on (a lease following its
	 * partition to another node is lost, at its deadline, as one that could
	 * not follow it); the deadline stays.
	 */
	setClock(clock: LeaseClock): void {
		if (this.#clock) this.#clock = clock
	}

	/**
	 * @internal The server answered, just now, a command of the lease's
	 * connection sent at `sentAt`. Arriving before the deadline, it moves
	 * the deadline on; arriving after it, nothing.
	 */
	answered(sentAt: number): void {
		const clock = this.#clock
		if (!clock || this.#settled || this.#controller.signal.aborted || now() >= this.#deadline) return
		this.#deadline = Math.max(this.#deadline, sentAt + clock.spanMs)
	}

	/** A timer at the deadline; answers move the deadline on, so it may find it moved and wait again. */
	#arm(): void {
		this.#look()
		if (this.#settled || this.#controller.signal.aborted) return
		// A timer can fire a little early: `#look` compares with the clock.
		this.#timer = setTimeout(() => this.#arm(), timerMs(Math.max(1, Math.ceil(this.#deadline - now()))))
		// The hold's connection keeps the process alive while the lease lives.
		this.#timer.unref()
	}

	#look(): void {
		const clock = this.#clock
		if (!clock || this.#settled || this.#controller.signal.aborted) return
		if (now() < this.#deadline) return
		this.#abort(clock.lapsed())
		clock.onLapse()
	}

	#abort(error: HoldlineError): void {
		if (!this.#controller.signal.aborted) this.#controller.abort(error)
	}
}

/**
 * A `JSON.stringify` replacer that writes every `bigint` (fences, lease ids)
 * as its decimal text: `JSON.stringify({ fence: lease.fence }, bigintsAsText)`.
 * Without one, `JSON.stringify` throws on a bigint.
 */
export function bigintsAsText(_key: string, value: unknown): unknown {
	return typeof value === 'bigint' ? value.toString() : value
}
