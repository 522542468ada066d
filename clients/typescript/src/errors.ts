/**
 * `HoldlineError`: the one error class, its kinds, and the texts in the
 * core's shape (`lock NAME: key "KEY": WHAT: KIND`) for the errors the
 * client makes itself. Errors from the server carry its text unchanged.
 */

/**
 * What went wrong: the five kinds of failure of the Rust core (its
 * `ErrorKind`), written as the core writes them at the end of its texts;
 * the server's error replies carry them in capitals as their first word.
 */
export type ErrorKind = 'invalid' | 'in use' | 'lost' | 'limit' | 'closed'

/** The first word of a server error reply, for each kind. */
const KIND_OF_WORD: Record<string, ErrorKind> = {
	INVALID: 'invalid',
	INUSE: 'in use',
	LOST: 'lost',
	LIMIT: 'limit',
	CLOSED: 'closed',
}

/**
 * What tells an error apart within its kind, without reading its text:
 * `'NOPERM'`, a command naming a lock that the connection's user may not
 * use (`holdline serve --users`; kind `'invalid'`).
 */
export type ErrorCode = 'NOPERM'

/** A holdline error: `kind` says what happened, `message` is the core's text. */
export class HoldlineError extends Error {
	override readonly name = 'HoldlineError'
	/** `'NOPERM'` for a lock the connection's user may not use; absent otherwise. */
	readonly code?: ErrorCode

	constructor(
		readonly kind: ErrorKind,
		message: string,
		options?: { cause?: unknown; code?: ErrorCode },
	) {
		super(message, options)
		if (options?.code !== undefined) this.code = options.code
	}
}

/**
 * The error for a server's error reply. The five kinds carry the core's
 * text; anything else (`ERR` from a server too old for this client, say)
 * is `invalid` and keeps its first word; `NOPERM` (a lock the user may not
 * use) is `invalid` too, its whole line kept, with `code: 'NOPERM'`.
 */
export function fromServer(word: string, text: string): HoldlineError {
	const kind = KIND_OF_WORD[word]
	if (kind) return new HoldlineError(kind, text)
	const line = text ? `${word} ${text}` : word
	return word === 'NOPERM' ? new HoldlineError('invalid', line, { code: 'NOPERM' }) : new HoldlineError('invalid', line)
}

/** Keys longer than this many characters are cut in error texts. */
const KEY_SHOWN_CHARS = 64

/**
 * The key as the core's texts show it: Rust's `{:?}` of the text, its first
 * 64 characters only, with `...` inside the quotes when it was cut.
 */
export function showKey(key: string): string {
	const chars = Array.from(key)
	const shown = chars.slice(0, KEY_SHOWN_CHARS).map(debugChar).join('')
	return chars.length > KEY_SHOWN_CHARS ? `"${shown}..."` : `"${shown}"`
}

/** Rust's `{:?}` of a text, whole (lock names are shown this way). */
export function debugString(text: string): string {
	return `"${Array.from(text).map(debugChar).join('')}"`
}

/** One character as Rust's `str` Debug writes it. */
function debugChar(c: string): string {
	switch (c) {
		case '"':
			return '\\"'
		case '\\':
			return '\\\\'
		case '\n':
			return '\\n'
		case '\r':
			return '\\r'
		case '\t':
			return '\\t'
		case '\0':
			return '\\0'
	}
	// Other control characters as `\u{..}`; valid keys hold none, but a key
	// refused for holding one is shown in the error that refuses it.
	return /\p{Cc}/u.test(c) ? `\\u{${c.codePointAt(0)!.toString(16)}}` : c
}

/** `lock NAME: [key "KEY": ]WHAT: KIND`, or for `lost` `...: the lease was lost: WHAT`. */
export function errorFor(kind: ErrorKind, what: string, lock?: string, key?: string): HoldlineError {
	let text = lock === undefined ? 'store: ' : `lock ${lock}: `
	if (key !== undefined) text += `key ${showKey(key)}: `
	text += kind === 'lost' ? `the lease was lost: ${what}` : `${what}: ${kind}`
	return new HoldlineError(kind, text)
}
