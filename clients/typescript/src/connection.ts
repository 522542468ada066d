/**
 * One TCP connection to `holdline serve`: the RESP3 handshake, commands
 * answered in the order they were sent, the server's pushes, renewal while
 * a hold lives on it, and the news that it closed. A connection keeps the
 * process alive only while it is in use.
 */

import * as net from 'node:net'
import { Decoder, encodeCommand, RespError, RespPush, RespProtocolError, type Arg, type Reply } from './resp.js'
import { errorFor, fromServer } from './errors.js'

/** A command could not be answered: the connection closed first. */
export class ConnectionClosed extends Error {}

/** Where a server listens. */
export interface Address {
	host: string
	port: number
}

/** The default address of `holdline serve`. */
export const DEFAULT_PORT = 7380

/** Reads `host:port`, `[v6]:port`, `host` or `:port`. */
export function parseAddress(text: string): Address {
	const bad = () => errorFor('invalid', `the address ${JSON.stringify(text)} is not host:port`)
	const match = /^(?:\[([^\]]+)\]|([^:\s]*))(?::(\d{1,5}))?$/.exec(text)
	if (!match) throw bad()
	const host = match[1] ?? (match[2] || '127.0.0.1')
	const port = match[3] === undefined ? DEFAULT_PORT : Number(match[3])
	if (port < 1 || port > 65535) throw bad()
	return { host, port }
}

/** Shows an address as `host:port` (brackets around an IPv6 host). */
export function showAddress({ host, port }: Address): string {
	return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}

interface Pending {
	resolve(reply: Reply): void
	reject(error: ConnectionClosed): void
}

export class Connection {
	readonly #socket: net.Socket
	readonly #decoder: Decoder
	/** Sent commands not answered yet, oldest first. */
	#pending: Pending[] = []
	#closed: ConnectionClosed | undefined
	#closeListeners: Array<(why: ConnectionClosed) => void> = []
	#renewal: NodeJS.Timeout | undefined
	/** Who is told of each lease's loss, by lease id. */
	#lossWatchers = new Map<bigint, (text: string) => void>()
	/** Losses pushed before anyone watched their lease: a grant and its loss
	 * can arrive in one read, before the grant's awaiter has run. */
	#unclaimedLosses = new Map<bigint, string>()

	private constructor(socket: net.Socket) {
		this.#socket = socket
		this.#decoder = new Decoder(frame => this.#onFrame(frame))
		socket.setNoDelay(true)
		socket.on('data', chunk => {
			try {
				this.#decoder.push(chunk)
			} catch (e) {
				// A stream that cannot be read cannot be trusted further.
				if (!(e instanceof RespProtocolError)) throw e
				this.#shut(new ConnectionClosed(`the server sent an unreadable frame: ${e.message}`))
			}
		})
		socket.on('error', err => this.#shut(new ConnectionClosed(err.message, { cause: err })))
		socket.on('close', () => this.#shut(new ConnectionClosed('the server closed the connection')))
	}

	/** Connects and says `HELLO 3` (with `AUTH default TOKEN` when given one). */
	static async open(address: Address, token: string | undefined, timeoutMs: number): Promise<Connection> {
		const where = showAddress(address)
		const socket = net.connect({ host: address.host, port: address.port })
		const timer = setTimeout(() => socket.destroy(new Error(`no answer within ${timeoutMs}ms`)), timeoutMs)
		try {
			await new Promise<void>((resolve, reject) => {
				socket.once('connect', resolve)
				socket.once('error', reject)
			})
		} catch (e) {
			clearTimeout(timer)
			socket.destroy()
			throw cannotConnect(where, e)
		}
		const connection = new Connection(socket)
		const hello: Arg[] = token === undefined ? ['HELLO', 3] : ['HELLO', 3, 'AUTH', 'default', token]
		let reply: Reply
		try {
			reply = await connection.send(hello)
		} catch (e) {
			throw cannotConnect(where, e)
		} finally {
			clearTimeout(timer)
		}
		if (reply instanceof RespError) {
			connection.destroy()
			const refused = fromServer(reply.word, reply.text)
			throw errorFor('invalid', `the server at ${where} refused the connection (${refused.message})`)
		}
		return connection
	}

	get closed(): boolean {
		return this.#closed !== undefined
	}

	/** Sends a command; its reply (an error reply as a `RespError` value). */
	send(args: readonly Arg[]): Promise<Reply> {
		if (this.#closed) return Promise.reject(this.#closed)
		return new Promise((resolve, reject) => {
			this.#pending.push({ resolve, reject })
			this.#socket.write(encodeCommand(args))
		})
	}

	/**
	 * Calls `listener` once when the connection closes (at once if it has);
	 * answers a function that takes the listener off again.
	 */
	onClose(listener: (why: ConnectionClosed) => void): () => void {
		if (this.#closed) {
			listener(this.#closed)
			return () => {}
		}
		this.#closeListeners.push(listener)
		return () => {
			this.#closeListeners = this.#closeListeners.filter(l => l !== listener)
		}
	}

	/**
	 * In use: keep the process alive and call `renew` every `periodMs` (by
	 * default a `PING`: every command the server reads renews the
	 * connection's leases, even while a `HOLD` of it still waits).
	 */
	busy(periodMs: number, renew: () => void = () => this.#ping()): void {
		this.#socket.ref()
		clearInterval(this.#renewal)
		this.#renewal = setInterval(renew, periodMs)
		this.#renewal.unref()
	}

	#ping(): void {
		// A failed PING means the connection closed; `onClose` reports that.
		this.send(['PING']).catch(() => {})
	}

	/** Not in use: no renewal, and the process may exit while it idles. */
	idle(): void {
		clearInterval(this.#renewal)
		this.#renewal = undefined
		this.#socket.unref()
	}

	/** Closes at once; the server lets this connection's keys go. */
	destroy(why = new ConnectionClosed('the connection was closed by this client')): void {
		this.#shut(why)
	}

	/**
	 * Calls `listener` with the server's text when lease `id` is reported
	 * lost (at once if it was already); answers a function that stops it.
	 */
	watchLoss(id: bigint, listener: (text: string) => void): () => void {
		const text = this.#unclaimedLosses.get(id)
		if (text !== undefined) {
			this.#unclaimedLosses.delete(id)
			listener(text)
		}
		this.#lossWatchers.set(id, listener)
		return () => {
			this.#lossWatchers.delete(id)
		}
	}

	#onPush([kind, id, text]: Reply[]): void {
		// `["lost", lease, text]`; other pushes mean nothing to a holder.
		if (kind !== 'lost' || typeof id !== 'bigint') return
		const watcher = this.#lossWatchers.get(id)
		if (watcher) watcher(String(text))
		else this.#unclaimedLosses.set(id, String(text))
	}

	#onFrame(frame: Reply | RespPush): void {
		if (frame instanceof RespPush) {
			this.#onPush(frame.items)
			return
		}
		const pending = this.#pending.shift()
		if (!pending) {
			this.#shut(new ConnectionClosed('the server sent a reply to no command'))
			return
		}
		pending.resolve(frame)
	}

	#shut(why: ConnectionClosed): void {
		if (this.#closed) return
		this.#closed = why
		clearInterval(this.#renewal)
		this.#socket.destroy()
		const pending = this.#pending
		this.#pending = []
		for (const p of pending) p.reject(why)
		const listeners = this.#closeListeners
		this.#closeListeners = []
		for (const listener of listeners) listener(why)
	}
}

function cannotConnect(where: string, cause: unknown) {
	const why = cause instanceof Error ? cause.message : String(cause)
	const error = errorFor('closed', `cannot connect to ${where} (${why})`)
	return Object.assign(error, { cause })
}
