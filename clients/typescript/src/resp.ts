/**
 * The RESP wire format (versions 2 and 3): commands out as arrays of bulk
 * strings, replies in through a streaming decoder that hands over whole
 * frames only. Only what holdline's server sends needs decoding, but every
 * RESP3 type is understood so that nothing a server adds can desynchronise
 * the stream.
 */

/** An error reply: `-WORD text` (or a RESP3 bulk error). */
export class RespError {
	constructor(
		/** The first word, such as `INUSE` or `ERR`. */
		readonly word: string,
		/** What follows the first word and its space. */
		readonly text: string,
	) {}
}

/** A RESP3 push frame (`>`): an out-of-band message, not a reply. */
export class RespPush {
	constructor(readonly items: Reply[]) {}
}

/**
 * A decoded value: simple and bulk strings as text, integers and big
 * numbers as `bigint` (fences reach 2^63), doubles as numbers, nulls as
 * `null`, maps as `Map`, sets as arrays.
 */
export type Reply = string | bigint | number | boolean | null | RespError | Reply[] | Map<Reply, Reply>

/** One argument of a command: text or a whole number. */
export type Arg = string | number | bigint

/** Encodes a command as a RESP array of bulk strings. */
export function encodeCommand(args: readonly Arg[]): Buffer {
	const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)]
	for (const arg of args) {
		const bytes = Buffer.from(String(arg), 'utf8')
		parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, CRLF)
	}
	return Buffer.concat(parts)
}

const CRLF = Buffer.from('\r\n')

/** Thrown inside the decoder when a frame is not complete yet. */
const INCOMPLETE = Symbol('incomplete')

/** A frame the decoder cannot make sense of: the stream is unusable. */
export class RespProtocolError extends Error {}

/** Bytes that are not RESP; `head` holds the first of them (up to 10). */
export class RespNotResp extends RespProtocolError {
	constructor(readonly head: Buffer) {
		super(`not RESP: ${JSON.stringify(head.toString('latin1'))}`)
	}
}

/** A header announcing `size` bytes, over the decoder's limit. */
export class RespTooLarge extends RespProtocolError {
	constructor(readonly size: bigint) {
		super(`a reply of ${size} bytes`)
	}
}

/** The largest reply a connection takes unless `maxReplyBytes` says otherwise: 64 MiB. */
export const MAX_REPLY_BYTES = 64 * 1024 * 1024

/** The first byte of every RESP2 and RESP3 frame. */
const TYPES = new Set(Buffer.from('+-:$*_,#!=(%~>|'))

/**
 * A streaming decoder: `push` bytes in as they arrive; every whole frame is
 * handed to `onFrame` in order (a `RespPush` for a push, else the reply).
 * Bytes that are not RESP throw `RespNotResp` as soon as they are seen; a
 * header announcing more than `maxReply` bytes (a string's length, or an
 * aggregate's count times 3, the fewest its elements take) throws
 * `RespTooLarge` before any of it is buffered.
 */
export class Decoder {
	#buffer: Buffer = Buffer.alloc(0)
	#pos = 0
	/** Where the element being read starts. */
	#start = 0

	constructor(
		private readonly onFrame: (frame: Reply | RespPush) => void,
		readonly maxReply: number = MAX_REPLY_BYTES,
	) {}

	push(chunk: Buffer): void {
		this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk])
		for (;;) {
			this.#pos = 0
			let frame: Reply | RespPush
			try {
				frame = this.#value()
			} catch (e) {
				if (e === INCOMPLETE) return
				if (e instanceof RespProtocolError && !(e instanceof RespNotResp) && !(e instanceof RespTooLarge)) throw this.#garbled()
				throw e
			}
			// Drop the frame's bytes before handing it over, so a frame
			// handler that throws cannot make it be handed over twice.
			this.#buffer = this.#buffer.subarray(this.#pos)
			this.onFrame(frame)
			if (this.#buffer.length === 0) {
				this.#buffer = Buffer.alloc(0)
				return
			}
		}
	}

	#line(): string {
		const end = this.#buffer.indexOf(CRLF, this.#pos)
		if (end < 0) {
			if (this.#buffer.length > this.maxReply) throw new RespTooLarge(BigInt(this.#buffer.length))
			throw INCOMPLETE
		}
		const line = this.#buffer.toString('utf8', this.#pos, end)
		this.#pos = end + 2
		return line
	}

	/** A length line: a count of items taking `per` bytes each at least, or -1 for a null. */
	#length(line: string, per = 1): number {
		if (!/^-?\d+$/.test(line)) throw this.#garbled()
		const n = BigInt(line)
		if (n * BigInt(per) > BigInt(this.maxReply)) throw new RespTooLarge(n * BigInt(per))
		return Number(n)
	}

	/** The bytes of the element being read, from its type byte on. */
	#garbled(): RespNotResp {
		return new RespNotResp(Buffer.from(this.#buffer.subarray(this.#start, this.#start + 10)))
	}

	#bulk(length: number): string {
		const end = this.#pos + length
		if (this.#buffer.length < end + 2) throw INCOMPLETE
		const text = this.#buffer.toString('utf8', this.#pos, end)
		this.#pos = end + 2
		return text
	}

	#items(count: number): Reply[] {
		const items: Reply[] = []
		for (let i = 0; i < count; i++) {
			const item = this.#value()
			if (item instanceof RespPush) throw new RespProtocolError('a push inside an aggregate')
			items.push(item)
		}
		return items
	}

	#value(): Reply | RespPush {
		if (this.#pos >= this.#buffer.length) throw INCOMPLETE
		this.#start = this.#pos
		// Told at once, before any line end arrives.
		if (!TYPES.has(this.#buffer[this.#pos]!)) throw this.#garbled()
		const type = String.fromCharCode(this.#buffer[this.#pos]!)
		this.#pos += 1
		const line = this.#line()
		switch (type) {
			case '+':
				return line
			case '-':
				return errorOf(line)
			case ':':
			case '(':
				if (!/^[-+]?\d+$/.test(line)) throw new RespProtocolError(`bad integer ${JSON.stringify(line)}`)
				return BigInt(line)
			case '$': {
				const length = this.#length(line)
				return length < 0 ? null : this.#bulk(length)
			}
			case '!':
				return errorOf(this.#bulk(this.#length(line)))
			case '=':
				// Verbatim string: a three-letter format and a colon first.
				return this.#bulk(this.#length(line)).slice(4)
			case '*':
			case '~': {
				const count = this.#length(line, 3)
				return count < 0 ? null : this.#items(count)
			}
			case '>':
				return new RespPush(this.#items(this.#length(line, 3)))
			case '%': {
				const flat = this.#items(2 * this.#length(line, 6))
				const map = new Map<Reply, Reply>()
				for (let i = 0; i < flat.length; i += 2) map.set(flat[i]!, flat[i + 1]!)
				return map
			}
			case '|':
				// Attributes describe the next value; holdline has no use for them.
				this.#items(2 * this.#length(line, 6))
				return this.#value()
			case '_':
				return null
			case '#':
				return line === 't'
			case ',':
				return Number(line.replace(/^(-?)inf$/, '$1Infinity'))
			default:
				throw new RespProtocolError(`unknown frame type ${JSON.stringify(type)}`)
		}
	}
}

function errorOf(line: string): RespError {
	const space = line.indexOf(' ')
	return space < 0 ? new RespError(line, '') : new RespError(line.slice(0, space), line.slice(space + 1))
}
