/**
 * Durations: read from text (`'10s'`, `'2m'`, `'500ms'`, also `'1h'`,
 * `'1.5s'` and sums such as `'1m30s'`) or milliseconds as numbers, turned
 * into the whole milliseconds the server takes, and written back as the
 * Rust core writes them in its error texts. A bad one fails at once with an
 * `invalid` error naming the option. Also the two timing rules every client
 * shares for a link that stops answering.
 */

import { errorFor } from './errors.js'

/** A duration: text such as `'10s'`, or a number of milliseconds. */
export type Duration = string | number

const MS_PER_UNIT: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** One `<number><unit>` part; the whole text must be a run of them. */
const PART = /(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)/y

/** The longest duration sent: beyond 2^53 ms, milliseconds stop being exact. */
const MAX_MS = Number.MAX_SAFE_INTEGER

/**
 * The longest delay `setTimeout` and `setInterval` keep (about 24.8 days):
 * past it Node fires after 1 ms instead. A timer for longer runs in steps.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** `ms` as a timer's delay: at most [`MAX_TIMER_MS`], for a timer that looks again when it fires. */
export function timerMs(ms: number): number {
	return Math.min(ms, MAX_TIMER_MS)
}

/**
 * Whole milliseconds of a duration, rounded up so that `'0.5ms'` is not
 * zero. `what` names the option in the error (`ttl`, `maxHold`, `wait`).
 */
export function toMillis(value: unknown, what: string, lock: string, key?: string): number {
	const ms = parse(value)
	if (ms === undefined || ms > MAX_MS) {
		const shown = typeof value === 'string' ? JSON.stringify(value) : String(value)
		throw errorFor('invalid', `a ${what} is a duration such as '10s', '2m' or '500ms', or a number of milliseconds, not ${shown}`, lock, key)
	}
	return Math.ceil(ms)
}

function parse(value: unknown): number | undefined {
	if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? value : undefined
	if (typeof value !== 'string' || value === '') return undefined
	let total = 0
	PART.lastIndex = 0
	while (PART.lastIndex < value.length) {
		const at = PART.lastIndex
		const match = PART.exec(value)
		if (!match || match.index !== at) return undefined
		total += Number(match[1]) * MS_PER_UNIT[match[2]!]!
	}
	return total
}

/** `ttl` and `maxHold` are at least 1 ms, as in the core. */
export function toPositiveMillis(value: unknown, what: string, lock: string): number {
	const ms = toMillis(value, what, lock)
	if (ms < 1) throw errorFor('invalid', `a ${what} is at least 1ms`, lock)
	return ms
}

/** Milliseconds as the core's texts write them: `10s`, `1500ms`, `2m`, the shortest exact form. */
export function showMs(ms: number): string {
	if (ms !== 0 && ms % 60_000 === 0) return `${ms / 60_000}m`
	if (ms % 1000 === 0) return `${ms / 1000}s`
	return `${ms}ms`
}

/**
 * How long before the server may end a silent lease this client takes it
 * for lost: a tenth of the ttl, at least 10 ms (the lateness of a timer).
 */
export function lostMarginMs(ttlMs: number): number {
	return Math.max(10, ttlMs / 10)
}

/**
 * How long past its wait a hold that nothing ended is given up, its wait
 * counted from its call however many times it was sent: the ttl, at least
 * 1 s (the server's own answer may be late).
 */
export function waitGraceMs(ttlMs: number): number {
	return Math.max(ttlMs, 1000)
}

/**
 * The monotonic clock, in milliseconds: unmoved when the wall clock is set,
 * and running on while the process is stopped, so a stall shows in it.
 */
export function now(): number {
	return performance.now()
}
