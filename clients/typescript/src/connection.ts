/**
 * One connection to `holdline serve`, over TCP or TLS: the RESP3
 * handshake, commands answered in the order they were sent, the server's
 * pushes, renewal while a hold lives on it, and the news that it closed.
 * A connection keeps the process alive only while it is in use.
 */

import * as net from 'node:net'
import * as tls from 'node:tls'
import { showAddress, type Address, type Auth } from './address.js'
import { now, timerMs } from './duration.js'
import type { HoldlineError } from './errors.js'
import { Decoder, encodeCommand, MAX_REPLY_BYTES, RespError, RespNotResp, RespPush, RespProtocolError, RespTooLarge, type Arg, type Reply } from './resp.js'
import { cannotConnect, connectionClosed, connectRefused, connectSilent, notHoldline, notResp, replyTooLarge, tlsFailed, tokenMissing, tokenRefused } from './texts.js'

/** A command could not be answered: the connection closed first. */
export class ConnectionClosed extends Error {}

/** Why this client closed a connection that answered nothing for too long: a failure of the link, as a drop is. */
export class ConnectionSilent extends ConnectionClosed {}

/** A plain connection whose server answered with a TLS record: it speaks TLS. */
class ServerSpeaksTls extends ConnectionClosed {}

/** Why a plain connection to a TLS server fails, in `tls_failed`. */
const SPEAKS_TLS = 'the server speaks TLS: connect with rediss:// or the tls option'

interface Pending {
	resolve(reply: Reply): void
	reject(error: ConnectionClosed): void
	/** When the command was written, on the monotonic clock. */
	sentAt: number
}

export class Connection {
	readonly #socket: net.Socket
	readonly #decoder: Decoder
	/** Sent commands not answered yet, oldest first. */
	#pending: Pending[] = []
	#closed: ConnectionClosed | undefined
	/** Closed by `destroy`, not by the server or the network. */
	#byThisClient = false
	/** The send time of the last command answered: the server read it, so
	 * it renewed this connection's leases no earlier than then. */
	#lastAnswered = 0
	/** Told the send time of each answered command as its answer arrives: the clock of the lease held on this connection. */
	onAnswer: ((sentAt: number) => void) | undefined
	#closeListeners: Array<(why: ConnectionClosed) => void> = []
	#renewal: NodeJS.Timeout | undefined
	/** Who is told of each lease's loss, by lease id. */
	#lossWatchers = new Map<bigint, (text: string) => void>()
	/** Losses pushed before anyone watched their lease: a grant and its loss
	 * can arrive in one read, before the grant's awaiter has run. */
	#unclaimedLosses = new Map<bigint, string>()
	/** Who is told that a lease moved to another node (a planned hand-over), by lease id. */
	#moveWatchers = new Map<bigint, (moved: Moved) => void>()
	/** Moves pushed before anyone watched their lease, as losses are. */
	#unclaimedMoves = new Map<bigint, Moved>()
	#handover = false
	/** Told each `observe` push's items after its first, as they arrive: the observer on this connection. */
	onObserve: ((items: Reply[]) => void) | undefined

	/** Why the server's bytes were given up: `not_resp` or `reply_too_large`. */
	#fault: HoldlineError | undefined

	private constructor(socket: net.Socket, secure: boolean, where: string, maxReply: number) {
		this.#socket = socket
		this.#decoder = new Decoder(frame => this.#onFrame(frame), maxReply)
		socket.setNoDelay(true)
		let heard = secure
		socket.on('data', (chunk: Buffer) => {
			if (!heard) {
				heard = true
				// A TLS server answers plain text with an alert record (0x15) or
				// a handshake record (0x16), version 3.x; no RESP frame starts so.
				if ((chunk[0] === 0x15 || chunk[0] === 0x16) && (chunk.length < 2 || chunk[1] === 0x03)) {
					this.#shut(new ServerSpeaksTls(SPEAKS_TLS))
					return
				}
			}
			try {
				this.#decoder.push(chunk)
			} catch (e) {
				// A stream that cannot be read cannot be trusted further.
				if (!(e instanceof RespProtocolError)) throw e
				if (e instanceof RespTooLarge) this.#fault = replyTooLarge(where, e.size, maxReply)
				else if (e instanceof RespNotResp) this.#fault = notResp(where, e.head)
				this.#shut(new ConnectionClosed(`the server sent an unreadable frame: ${e.message}`))
			}
		})
		socket.on('error', err => this.#shut(new ConnectionClosed(err.message, { cause: err })))
		socket.on('close', () => this.#shut(new ConnectionClosed('the server closed the connection')))
	}

	/**
	 * Connects (over TLS given `tlsOptions`) and says `HELLO 3` (with
	 * `AUTH USER TOKEN` when given them), all within `timeoutMs`; fails
	 * with the texts every client shares: also a server that is not
	 * holdline (`not_holdline`), one that sends what is not RESP
	 * (`not_resp`), or announces a reply over `maxReply` bytes
	 * (`reply_too_large`), at once. Aborting `signal` (a hold given up)
	 * closes it at once and rejects with its reason: no dial outlives it.
	 */
	static async open(address: Address, auth: Auth | undefined, timeoutMs: number, tlsOptions?: tls.ConnectionOptions, maxReply: number = MAX_REPLY_BYTES, signal?: AbortSignal): Promise<Connection> {
		signal?.throwIfAborted()
		const where = showAddress(address)
		const secure = tlsOptions !== undefined
		const socket = secure ? tls.connect(tlsConnectOptions(address, tlsOptions)) : net.connect({ host: address.host, port: address.port })
		let silent = false
		let tcpUp = false
		socket.once('connect', () => (tcpUp = true))
		const timer = setTimeout(() => {
			silent = true
			socket.destroy(new Error(`no answer within ${timeoutMs}ms`))
		}, timeoutMs)
		const onAbort = () => socket.destroy(new Error('given up by its hold'))
		signal?.addEventListener('abort', onAbort, { once: true })
		const settled = () => {
			clearTimeout(timer)
			signal?.removeEventListener('abort', onAbort)
		}
		try {
			// Over TLS, `secureConnect`: the handshake done, the server's certificate checked.
			await new Promise<void>((resolve, reject) => {
				socket.once(secure ? 'secureConnect' : 'connect', resolve)
				socket.once('error', reject)
			})
		} catch (e) {
			settled()
			socket.destroy()
			if (signal?.aborted) throw signal.reason
			if (secure && tcpUp && !silent) throw Object.assign(tlsFailed(where, tlsReason(e)), { cause: e })
			throw dialFailed(where, silent, timeoutMs, e)
		}
		const connection = new Connection(socket, secure, where, maxReply)
		const hello: Arg[] = auth === undefined ? ['HELLO', 3] : ['HELLO', 3, 'AUTH', auth.user, auth.token]
		let reply: Reply
		try {
			reply = await connection.send(hello)
		} catch (e) {
			if (signal?.aborted) throw signal.reason
			if (connection.#fault !== undefined) throw Object.assign(connection.#fault, { cause: e })
			throw helloFailed(where, secure, silent, timeoutMs, e)
		} finally {
			settled()
		}
		if (reply instanceof RespError) {
			connection.destroy()
			throw helloRefused(where, reply)
		}
		const server = serverOf(reply)
		if (server !== 'holdline') {
			connection.destroy()
			throw notHoldline(where, server)
		}
		connection.#handover = helloField(reply, 'handover') === 1n
		return connection
	}

	get closed(): boolean {
		return this.#closed !== undefined
	}

	/**
	 * Whether the server said `handover` = 1 in its `HELLO` map: it can hand
	 * leases over to another node and take them (`SECRET`, `REATTACH`).
	 */
	get handover(): boolean {
		return this.#handover
	}

	/** Sends a command; its reply (an error reply as a `RespError` value). */
	send(args: readonly Arg[]): Promise<Reply> {
		if (this.#closed) return Promise.reject(this.#closed)
		return new Promise<Reply>((resolve, reject) => {
			this.#pending.push({ resolve, reject, sentAt: now() })
			this.#socket.write(encodeCommand(args))
		})
	}

	/**
	 * The send time of the last command the server answered on this
	 * connection (0 before any): the server renewed the connection's leases
	 * when it read that command, so it keeps them until that time plus
	 * their ttl at least.
	 */
	get lastAnswered(): number {
		return this.#lastAnswered
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
		this.#renewal = setInterval(renew, timerMs(periodMs))
		this.#renewal.unref()
	}

	#ping(): void {
		// A failed PING means the connection closed; `onClose` reports that.
		this.send(['PING']).catch(() => {})
	}

	/** Stops the renewal `busy` started, and nothing else: a lease let go renews no more. */
	stopRenewal(): void {
		clearInterval(this.#renewal)
		this.#renewal = undefined
	}

	/** Whether the open connection keeps the process alive (as `busy` makes it) or lets it exit (as `idle` does). */
	keepProcessAlive(on: boolean): void {
		if (on) this.#socket.ref()
		else this.#socket.unref()
	}

	/** Not in use: no renewal, and the process may exit while it idles. */
	idle(): void {
		clearInterval(this.#renewal)
		this.#renewal = undefined
		this.#socket.unref()
	}

	/** Closes at once; the server lets this connection's keys go. */
	destroy(why = new ConnectionClosed('the connection was closed by this client')): void {
		if (!this.#closed) this.#byThisClient = !(why instanceof ConnectionSilent)
		this.#shut(why)
	}

	/** Whether it failed: the server or the network ended it, or it went silent; not closed by this client's choice. */
	get dropped(): boolean {
		return this.#closed !== undefined && !this.#byThisClient
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

	/**
	 * Calls `listener` with where lease `id` went when the server pushes
	 * `["moved", lease, slot, "host:port"]` (at once if it did already);
	 * answers a function that stops it.
	 */
	watchMoved(id: bigint, listener: (moved: Moved) => void): () => void {
		const moved = this.#unclaimedMoves.get(id)
		if (moved !== undefined) {
			this.#unclaimedMoves.delete(id)
			listener(moved)
		}
		this.#moveWatchers.set(id, listener)
		return () => {
			this.#moveWatchers.delete(id)
		}
	}

	#onPush(items: Reply[]): void {
		const [kind, id, text] = items
		// `["moved", lease, slot, "host:port"]`: a planned hand-over took the lease to that node.
		if (kind === 'moved') {
			const moved = movedPush(items)
			if (moved === undefined) return
			const watcher = this.#moveWatchers.get(moved.id)
			if (watcher) watcher(moved)
			else this.#unclaimedMoves.set(moved.id, moved)
			return
		}
		// `["observe", lock, key, event, fence, permits, holder, note]`, for an observer.
		if (kind === 'observe') {
			this.onObserve?.(items.slice(1))
			return
		}
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
		// Answers come in the order the commands were sent: this only grows.
		this.#lastAnswered = pending.sentAt
		this.onAnswer?.(pending.sentAt)
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

/** A lease moved by a planned hand-over: its id on the old node, its slot, and the node (`host:port`) it went to. */
export interface Moved {
	id: bigint
	slot: number
	address: string
}

/** `["moved", lease, slot, "host:port"]`'s fields; `undefined` when it is not that. */
function movedPush(items: Reply[]): Moved | undefined {
	const [, id, slot, address] = items
	if (typeof id !== 'bigint' || typeof slot !== 'bigint' || typeof address !== 'string') return undefined
	return { id, slot: Number(slot), address }
}

/**
 * What `tls.connect` is given: the caller's options, with the address's
 * host and port (never a socket or path of the options), and the host as
 * the server name (SNI) when it is a name and the options name none.
 */
function tlsConnectOptions({ host, port }: Address, options: tls.ConnectionOptions): tls.ConnectionOptions {
	const servername = options.servername ?? (net.isIP(host) ? undefined : host)
	return { ...options, host, port, servername, socket: undefined, path: undefined }
}

/** An error of OpenSSL's (Node sets its `library` and an `ERR_SSL_` code): a handshake or an alert. */
function isTlsError(e: unknown): boolean {
	if (!(e instanceof Error)) return false
	const { code, library } = e as { code?: unknown; library?: unknown }
	return library === 'SSL routines' || (typeof code === 'string' && code.startsWith('ERR_SSL_'))
}

/**
 * The words of a TLS failure: OpenSSL's reason (`tlsv13 alert certificate
 * required`) rather than its whole line of codes and source files, else
 * the message (`self-signed certificate in certificate chain`).
 */
function tlsReason(e: unknown): string {
	if (!(e instanceof Error)) return String(e)
	const reason = (e as { reason?: unknown }).reason
	return typeof reason === 'string' && reason !== '' ? reason : e.message
}

/**
 * Why a connection closed before `HELLO` was answered: a TLS alert (under
 * TLS 1.3 a refused client certificate is told only after the handshake),
 * a TLS server met in plain text, or else as dialling failed.
 */
function helloFailed(where: string, secure: boolean, silent: boolean, timeoutMs: number, e: unknown): HoldlineError {
	const cause = e instanceof ConnectionClosed && e.cause !== undefined ? e.cause : e
	if (!silent && e instanceof ServerSpeaksTls) return Object.assign(tlsFailed(where, SPEAKS_TLS), { cause: e })
	if (!silent && secure && isTlsError(cause)) return Object.assign(tlsFailed(where, tlsReason(cause)), { cause })
	// Connected, then closed before the answer: as a store command's connection.
	if (!silent && e instanceof ConnectionClosed) return Object.assign(connectionClosed(), { cause: e })
	return dialFailed(where, silent, timeoutMs, e)
}

/**
 * The name and version a `HELLO` answer gives (a map, or RESP2's flat
 * array): `holdline`, `redis 7.0.15`; undefined when it names no server.
 */
function serverOf(reply: Reply): string | undefined {
	const server = helloField(reply, 'server')
	if (typeof server !== 'string') return undefined
	const version = helloField(reply, 'version')
	return server === 'holdline' || typeof version !== 'string' ? server : `${server} ${version}`
}

/** A field of a `HELLO` answer (a map, or RESP2's flat array). */
function helloField(reply: Reply, name: string): Reply | undefined {
	if (reply instanceof Map) return reply.get(name)
	if (Array.isArray(reply)) {
		for (let i = 0; i + 1 < reply.length; i += 2) if (reply[i] === name) return reply[i + 1]
	}
	return undefined
}

/** Why dialling or `HELLO` failed: the timeout, or the platform's own words. */
function dialFailed(where: string, silent: boolean, timeoutMs: number, cause: unknown): HoldlineError {
	if (silent) return connectSilent(where, timeoutMs)
	const why = cause instanceof Error ? cause.message : String(cause)
	return Object.assign(cannotConnect(where, why), { cause })
}

/** A `HELLO` answered with an error: a token missing or refused, or the connection refused (at the server's limit, say). */
function helloRefused(where: string, reply: RespError): HoldlineError {
	if (reply.word === 'NOAUTH') return tokenMissing()
	if (reply.word === 'WRONGPASS') return tokenRefused()
	return connectRefused(where, reply.text ? `${reply.word} ${reply.text}` : reply.word)
}
