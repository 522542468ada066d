/**
 * Where each command goes. Against one `holdline serve` (a server that
 * answers `CLUSTER SLOTS` with an error) everything goes to its one pool,
 * as ever. Against a cluster (`holdline serve --etcd`), a pool per node and
 * the map of which node serves which slot: learned with `CLUSTER SLOTS` at
 * connect, mended by each `MOVED`, and asked again after a `MOVED`, a
 * `CLUSTERDOWN` or a connection to a node that failed.
 */

import { showAddress, type Address } from './address.js'
import { fromServer } from './errors.js'
import { Pool, type PoolOptions } from './pool.js'
import { pause, untilAborted } from './deadline.js'
import { exchange } from './request.js'
import { RespError, type Arg, type Reply } from './resp.js'
import { SLOTS, slotOf } from './slots.js'
import { movedLoop, slotUnserved } from './texts.js'

/** `MOVED` answers one command follows; the next fails it `moved_loop`. */
export const MAX_REDIRECTS = 5
/** `CLUSTERDOWN` answers to one command before it fails `slot_unserved`. */
export const CLUSTER_DOWN_TRIES = 10
/** The pause after a `CLUSTERDOWN` (and the map asked again) before the command is sent again. */
export const CLUSTER_DOWN_PAUSE_MS = 100
/**
 * How long one node has to answer `CLUSTER SLOTS` when the map is asked for
 * again, dialling included (the connect timeout, if shorter); then the next
 * node is asked, and this one is asked last from then on.
 */
export const MAP_REFRESH_NODE_TIMEOUT_MS = 2000

export class Router {
	readonly #seeds: readonly Address[]
	readonly #options: PoolOptions
	/** A pool per node, by `host:port`. */
	readonly #pools = new Map<string, Pool>()
	/** The node (`host:port`) serving each slot; `undefined` in single-node mode. */
	#owners: Array<string | undefined> | undefined
	/** Where a command without a key, or for a slot missing from the map, goes: the node that answered last. */
	#home: Pool
	#refreshing: Promise<void> | undefined
	/** Nodes (`host:port`) whose connections failed, or that did not answer a refresh in time: asked for the map last. */
	readonly #failing = new Set<string>()
	#closed = false
	#redirects = 0
	/** The node `connect` reached, `host:port`. */
	readonly address: string

	private constructor(seeds: readonly Address[], options: PoolOptions, first: Address) {
		this.#seeds = seeds
		this.#options = options
		this.#home = this.#pool(first)
		this.address = this.#home.where
	}

	/**
	 * Tries `seeds` in order: the first that connects, says `HELLO` and
	 * answers `CLUSTER SLOTS` wins, in cluster mode if that answer was a
	 * map, else in single-node mode. None: the last one's error.
	 */
	static async connect(seeds: readonly Address[], options: PoolOptions): Promise<Router> {
		let failure: unknown
		for (const seed of seeds) {
			const router = new Router(seeds, options, seed)
			try {
				const reply = await exchange(router.#home, ['CLUSTER', 'SLOTS'])
				if (Array.isArray(reply)) router.#apply(reply, router.#home)
				return router
			} catch (e) {
				router.close()
				failure = e
			}
		}
		throw failure
	}

	get closed(): boolean {
		return this.#closed
	}

	/** Whether the server is a cluster: commands are routed by their key's slot. */
	get clustered(): boolean {
		return this.#owners !== undefined
	}

	/** How many `MOVED` answers were followed. */
	get redirects(): number {
		return this.#redirects
	}

	/** The pool of the node serving `key`'s slot; with no key (or in single-node mode) the home node's. */
	poolFor(key: string | undefined): Pool {
		const owner = key === undefined ? undefined : this.#owners?.[slotOf(key)]
		return owner === undefined ? this.#home : this.#pools.get(owner)!
	}

	/** A `MOVED slot host:port`: that node serves `slot` from now on; the whole map is asked for again. */
	moved(slot: number, address: Address): void {
		this.#redirects++
		const pool = this.#pool(address)
		if (this.#owners && slot >= 0 && slot < SLOTS) this.#owners[slot] = pool.where
		void this.refresh()
	}

	/**
	 * Asks for the map again (`CLUSTER SLOTS`): the nodes of the map, then
	 * the others known (those named by a `MOVED`), then the seed addresses,
	 * those whose connections failed last; the first to answer with a map
	 * wins. Each has `MAP_REFRESH_NODE_TIMEOUT_MS` (the connect timeout if
	 * shorter) to answer, dialling included. One at a time: asked while a
	 * refresh runs, it answers that one. Never rejects.
	 */
	refresh(): Promise<void> {
		if (!this.#owners || this.#closed) return Promise.resolve()
		this.#refreshing ??= this.#refreshOnce()
			.catch(() => {})
			.finally(() => (this.#refreshing = undefined))
		return this.#refreshing
	}

	async #refreshOnce(): Promise<void> {
		const mapped = [...new Set(this.#owners)].flatMap(where => (where === undefined ? [] : [where]))
		const seeds = this.#seeds.map(seed => this.#pool(seed).where)
		const candidates = [...new Set([...mapped, ...this.#pools.keys(), ...seeds])]
		// A stable sort: in that order otherwise.
		candidates.sort((x, y) => Number(this.#failing.has(x)) - Number(this.#failing.has(y)))
		for (const where of candidates) {
			if (this.#closed) return
			const pool = this.#pools.get(where)!
			let reply: Reply
			try {
				reply = await exchange(pool, ['CLUSTER', 'SLOTS'], undefined, undefined, Math.min(MAP_REFRESH_NODE_TIMEOUT_MS, pool.connectTimeoutMs))
			} catch {
				this.#failing.add(where)
				continue
			}
			this.#failing.delete(where)
			if (Array.isArray(reply)) {
				this.#apply(reply, pool)
				return
			}
		}
	}

	/** Every node of the map, each once (in single-node mode, the one server). */
	nodePools(): Pool[] {
		if (!this.#owners) return [this.#home]
		const mapped = new Set(this.#owners)
		mapped.delete(undefined)
		return [...mapped].map(where => this.#pools.get(where!)!)
	}

	/** Takes `CLUSTER SLOTS`'s answer (`[start, end, [host, port, id], ...]` per served range) as the map. */
	#apply(ranges: Reply[], from: Pool): void {
		const owners = new Array<string | undefined>(SLOTS)
		for (const range of ranges) {
			if (!Array.isArray(range)) continue
			const [start, end, node] = range
			if (typeof start !== 'bigint' || typeof end !== 'bigint' || !Array.isArray(node)) continue
			const [host, port] = node
			if (typeof port !== 'bigint' || port < 1n || port > 65535n) continue
			// An empty host, as Redis has it: the node asked.
			const address = { host: typeof host === 'string' && host !== '' ? host : from.address.host, port: Number(port) }
			const where = this.#pool(address).where
			const last = Math.min(SLOTS - 1, Number(end))
			for (let slot = Math.max(0, Number(start)); slot <= last; slot++) owners[slot] = where
		}
		this.#owners = owners
		this.#home = from
	}

	/** The pool of the node at `address`, made on first use (with the first address's user, token and TLS). */
	#pool(address: Address): Pool {
		const where = showAddress(address)
		let pool = this.#pools.get(where)
		if (!pool) {
			// A connection that fails (refused, dropped, silent): the map may
			// have changed, and this node is asked for it last.
			const onFailure = () => {
				this.#failing.add(where)
				void this.refresh()
			}
			pool = new Pool({ host: address.host, port: address.port }, { ...this.#options, onFailure })
			if (this.#closed) pool.close()
			this.#pools.set(where, pool)
		}
		return pool
	}

	/** Closes every node's connections; later `take`s fail. */
	close(): void {
		this.#closed = true
		for (const pool of this.#pools.values()) pool.close()
	}
}

/**
 * One command's `MOVED` and `CLUSTERDOWN` answers: `follow` says whether
 * to send it again (and where: `pool()`), and fails it when there were too
 * many. It counts nothing of a lease's timing: a lease's clock starts at
 * the send of the HOLD that was granted. Nor of a hold's wait: that runs
 * from the hold's call (see `HoldDeadline`).
 */
export class Redirects {
	#moved = 0
	#down = 0

	constructor(
		private readonly router: Router,
		/** What the command is about, for the texts. */
		private readonly lock: string | undefined,
		/** The key whose slot the command goes by. */
		private readonly key: string,
	) {}

	/** Where the command goes now. */
	pool(): Pool {
		return this.router.poolFor(this.key)
	}

	/**
	 * Whether `reply` sends the command on: a `MOVED` (that node noted) or a
	 * `CLUSTERDOWN` (the map asked again, then a pause), in cluster mode.
	 * Throws `moved_loop` at the 6th `MOVED` (5 followed), `slot_unserved`
	 * at the 10th `CLUSTERDOWN`. Aborting `signal` (a hold's deadline) ends
	 * the wait for the map and the pause at once, rejecting with its
	 * reason: a hold given up sends nothing more.
	 */
	async follow(reply: Reply, signal?: AbortSignal): Promise<boolean> {
		if (!(reply instanceof RespError) || !this.router.clustered) return false
		if (reply.word === 'MOVED') {
			const target = movedTarget(reply.text)
			if (!target) return false
			if (++this.#moved > MAX_REDIRECTS) throw movedLoop(this.lock, this.key)
			this.router.moved(target.slot, target.address)
			return true
		}
		if (reply.word === 'CLUSTERDOWN') {
			if (++this.#down >= CLUSTER_DOWN_TRIES) throw slotUnserved(this.lock, this.key, slotOf(this.key))
			// The refresh is shared with other commands: stop waiting for it, not it.
			await untilAborted(this.router.refresh(), signal)
			await pause(CLUSTER_DOWN_PAUSE_MS, signal)
			return true
		}
		return false
	}
}

/** `MOVED`'s text, `slot host:port` (an IPv6 host bare or in brackets); `undefined` when it is not that. */
export function movedTarget(text: string): { slot: number; address: Address } | undefined {
	const match = /^(\d+) (\S+):(\d+)$/.exec(text)
	if (!match) return undefined
	const [, slot, host, port] = match
	const address = { host: host!.replace(/^\[(.*)\]$/, '$1'), port: Number(port) }
	if (address.host === '' || address.port < 1 || address.port > 65535) return undefined
	return { slot: Number(slot), address }
}

/**
 * A one-off command (`INSPECT`, `PUT`, `GET`) sent to the node serving
 * `routeKey`, following `MOVED` and `CLUSTERDOWN`; an error reply rejects
 * with the server's text. `lock` and `key` name it in the texts, as for `request`.
 */
export async function routedRequest(router: Router, args: readonly Arg[], routeKey: string, lock?: string, key?: string): Promise<Reply> {
	const redirects = new Redirects(router, lock, routeKey)
	for (;;) {
		const reply = await exchange(redirects.pool(), args, lock, key)
		if (await redirects.follow(reply)) continue
		if (reply instanceof RespError) throw fromServer(reply.word, reply.text)
		return reply
	}
}
