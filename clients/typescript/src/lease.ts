/**
 * `Lease`: what a holder's function is given: the key, the fence, and a
 * signal that aborts the moment the lease is lost, from the server's news
 * or from the clock.
 *
 * The clock: the server keeps a lease at least a ttl past the last command
 * it read from the lease's connection. Once that much time has passed (less
 * a margin) since the send of the last command it answered, the server may
 * already have given the key to the next in line, so the lease is lost here
 * whatever arrives later. A timer aborts the signal then; and since a
 * stopped process runs no timer, `lost`, `check()` and `signal` each read
 * the clock themselves first, so the first look after a stall already
 * answers lost.
 */

import { now } from './duration.js'
import type { HoldlineError } from './errors.js'

/** @internal What the lease's clock needs from its hold. */
export interface LeaseClock {
	/** When the lease is to be taken for lost unless the server answers before. */
	deadline(): number
	/** The `lost` error for a lease whose deadline passed. */
	lapsed(): HoldlineError
	/** Called once, after the lease was lost by the clock (closes its connection). */
	onLapse(): void
}

export class Lease {
	readonly #controller = new AbortController()
	#settled = false
	#clock: LeaseClock | undefined
	#timer: NodeJS.Timeout | undefined

	/** Made by `hold` and `tryHold`. */
	constructor(
		/** The key, as text (a number key is its decimal text). */
		readonly key: string,
		/**
		 * The fencing token: strictly greater than every earlier grant's of
		 * this key. A `bigint`, since fences reach far past 2^53.
		 */
		readonly fence: bigint,
		/** @internal The server's id of this lease. */
		readonly id: bigint,
	) {}

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

	/** @internal Starts the clock: from now on the lease is lost at `clock.deadline()`. */
	watchClock(clock: LeaseClock): void {
		this.#clock = clock
		this.#arm()
	}

	/** A timer at the deadline; the deadline moves on with every answer, so it may find it moved and wait again. */
	#arm(): void {
		if (this.#settled || this.#controller.signal.aborted || !this.#clock) return
		this.#look()
		if (this.#controller.signal.aborted) return
		// A timer can fire a little early: `#look` compares with the clock.
		this.#timer = setTimeout(() => this.#arm(), Math.max(1, Math.ceil(this.#clock.deadline() - now())))
		// The hold's connection keeps the process alive while the lease lives.
		this.#timer.unref()
	}

	#look(): void {
		const clock = this.#clock
		if (!clock || this.#settled || this.#controller.signal.aborted) return
		if (now() < clock.deadline()) return
		this.#abort(clock.lapsed())
		clock.onLapse()
	}

	#abort(error: HoldlineError): void {
		if (!this.#controller.signal.aborted) this.#controller.abort(error)
	}
}
