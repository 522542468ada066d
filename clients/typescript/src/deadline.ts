/**
 * A hold's deadline. Its wait runs from its call, not from each send (a
 * `HOLD` sent again after a `MOVED` or a `CLUSTERDOWN` carries the wait
 * left), and the hold as a whole (routing, dialling, the map asked for
 * again, the pause after a `CLUSTERDOWN`, the reply) is given up at its
 * call + wait + grace: one bound, however many sends, so retries cannot
 * stretch a hold past it. Each awaited step takes the deadline's signal.
 */

import { now, timerMs } from './duration.js'

export class HoldDeadline {
	readonly #controller = new AbortController()
	/** When the wait ends: the call + the wait. */
	readonly #waitEnd: number
	#timer: NodeJS.Timeout | undefined
	readonly #caller: AbortSignal | undefined
	readonly #onCallerAbort = () => this.#controller.abort(this.#caller?.reason)
	#silent = false

	/**
	 * Starts at the call: gives up `waitMs + graceMs` from now, aborting
	 * `signal` with `giveUp()`, or at once with the reason of `caller`
	 * when the caller aborts first.
	 */
	constructor(waitMs: number, graceMs: number, giveUp: () => unknown, caller: AbortSignal | undefined) {
		this.#waitEnd = now() + waitMs
		this.#caller = caller
		this.#giveUpAfter(waitMs + graceMs, giveUp)
		if (caller?.aborted) this.#onCallerAbort()
		else caller?.addEventListener('abort', this.#onCallerAbort, { once: true })
	}

	/**
	 * Gives the hold up once `ms` have passed, in steps a timer keeps: a
	 * wait longer than `setTimeout`'s range (about 24.8 days) would
	 * otherwise be given up at once.
	 */
	#giveUpAfter(ms: number, giveUp: () => unknown): void {
		const step = timerMs(ms)
		this.#timer = setTimeout(() => {
			if (this.#controller.signal.aborted) return
			if (ms > step) return this.#giveUpAfter(ms - step, giveUp)
			this.#silent = true
			this.#controller.abort(giveUp())
		}, step)
		// What the hold waits on keeps the process alive, not this timer.
		this.#timer.unref()
	}

	/** Aborted when the hold is given up: by its bound (reason: the `wait_silent` error) or by the caller (the caller's reason). */
	get signal(): AbortSignal {
		return this.#controller.signal
	}

	/** Whether the bound, not the caller, gave the hold up. */
	get silent(): boolean {
		return this.#silent
	}

	/** The wait left, in whole milliseconds rounded down; 0 once spent (the server then grants only a key free at once). */
	waitLeftMs(): number {
		return Math.max(0, Math.floor(this.#waitEnd - now()))
	}

	/** The hold ended (granted, refused or failed): stops the bound's timer and the watch on the caller's signal. */
	end(): void {
		clearTimeout(this.#timer)
		this.#caller?.removeEventListener('abort', this.#onCallerAbort)
	}
}

/**
 * `promise`'s outcome, or a rejection with `signal`'s reason once it
 * aborts first: for a step shared with others (the map asked for again)
 * that a hold given up stops waiting for without ending it.
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
	if (!signal) return promise
	if (signal.aborted) return Promise.reject(signal.reason)
	return new Promise<T>((resolve, reject) => {
		const onAbort = () => reject(signal.reason)
		signal.addEventListener('abort', onAbort, { once: true })
		promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
	})
}

/** Resolves after `ms`, or rejects with `signal`'s reason once it aborts first (its timer cleared). */
export function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
	if (signal?.aborted) return Promise.reject(signal.reason)
	return new Promise<void>((resolve, reject) => {
		const onAbort = () => {
			clearTimeout(timer)
			reject(signal?.reason)
		}
		const timer = setTimeout(() => {
			signal?.removeEventListener('abort', onAbort)
			resolve()
		}, ms)
		signal?.addEventListener('abort', onAbort, { once: true })
	})
}
