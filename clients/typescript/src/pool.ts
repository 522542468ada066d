/**
 * The store's connections. The server carries out one connection's
 * commands one at a time, so a waiting `HOLD` would hold up every command
 * sent after it on its connection: each hold therefore has a connection of
 * its own from the time it asks until its key is let go, and connections
 * are kept for reuse once their hold is over.
 */

import type * as tls from 'node:tls'
import { showAddress, type Address, type Auth } from './address.js'
import { Connection } from './connection.js'

export interface PoolOptions {
	/** The user and token each connection says in `HELLO` (`undefined`: none). */
	auth: Auth | undefined
	/** Speak TLS with these options (`undefined`: plain TCP). */
	tls: tls.ConnectionOptions | undefined
	connectTimeoutMs: number
	/** Connections kept open for reuse while nothing uses them. */
	maxIdle: number
	/** The largest reply a connection takes (`maxReplyBytes`). */
	maxReplyBytes?: number
	/** Told when dialling fails or a connection fails (dropped, or closed for its silence). */
	onFailure?: () => void
}

export class Pool {
	/** Free connections, the most recently used last. */
	#idle: Connection[] = []
	#all = new Set<Connection>()
	#closed = false

	constructor(
		readonly address: Address,
		private readonly options: PoolOptions,
	) {}

	get closed(): boolean {
		return this.#closed
	}

	get connectTimeoutMs(): number {
		return this.options.connectTimeoutMs
	}

	get where(): string {
		return showAddress(this.address)
	}

	/**
	 * A free connection, opened when none is free (dialling and `HELLO`
	 * within `timeoutMs`, by default the connect timeout). Aborting
	 * `signal` ends the dial, rejecting with its reason; that tells
	 * nothing of the node, so it is no failure of it.
	 */
	async take(timeoutMs = this.options.connectTimeoutMs, signal?: AbortSignal): Promise<Connection> {
		for (let c = this.#idle.pop(); c; c = this.#idle.pop()) {
			if (!c.closed) return c
		}
		let c: Connection
		try {
			c = await Connection.open(this.address, this.options.auth, timeoutMs, this.options.tls, this.options.maxReplyBytes, signal)
		} catch (e) {
			if (!this.#closed && !signal?.aborted) this.options.onFailure?.()
			throw e
		}
		if (this.#closed) {
			c.destroy()
			throw new Error('the store closed while connecting')
		}
		this.#all.add(c)
		c.onClose(() => {
			this.#all.delete(c)
			const at = this.#idle.indexOf(c)
			if (at >= 0) this.#idle.splice(at, 1)
			if (c.dropped && !this.#closed) this.options.onFailure?.()
		})
		return c
	}

	/** Takes back a connection whose hold is over. */
	giveBack(c: Connection): void {
		c.idle()
		if (c.closed) return
		if (this.#closed || this.#idle.length >= this.options.maxIdle) c.destroy()
		else this.#idle.push(c)
	}

	/** Closes every connection, in use or not; later `take`s fail. */
	close(): void {
		this.#closed = true
		this.#idle = []
		for (const c of [...this.#all]) c.destroy()
	}
}
