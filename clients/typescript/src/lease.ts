/**
 * `Lease`: what a holder's function is given: the key, the fence, and a
 * signal that aborts the moment the lease is lost.
 */

import type { HoldlineError } from './errors.js'

export class Lease {
	readonly #controller = new AbortController()
	/** @internal Set once the holder's function has settled: a later close
	 * of the connection is the key being let go, not a loss. */
	settled = false

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

	/** Aborts, with the `lost` error as its `reason`, once the lease is lost. */
	get signal(): AbortSignal {
		return this.#controller.signal
	}

	/** Whether the lease has been lost (its signal aborted). */
	get lost(): boolean {
		return this.#controller.signal.aborted
	}

	/** Throws the `lost` error once the lease is lost; else does nothing. */
	check(): void {
		if (this.lost) throw this.#controller.signal.reason
	}

	/** @internal Marks the lease lost; the first reason stays. */
	lose(error: HoldlineError): void {
		if (!this.lost) this.#controller.abort(error)
	}

	/** @internal The `lost` error, once lost. */
	get lostError(): HoldlineError | undefined {
		return this.lost ? (this.#controller.signal.reason as HoldlineError) : undefined
	}
}
