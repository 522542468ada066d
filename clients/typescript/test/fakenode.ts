/**
 * Test helper: scripted cluster nodes. Each reads whole RESP commands,
 * records them, and answers by a script: the test says who serves which
 * slots (`layout`, what `CLUSTER SLOTS` answers and whom a node names in
 * `MOVED`) and may answer any command itself first.
 */

import { afterEach } from 'node:test'
import * as net from 'node:net'
import { once } from 'node:events'
import type { Store } from '../src/index.js'
import { slotOf } from '../src/slots.js'
import type { Refused } from './server.js'

/** A served range of slots and its node (a refused address: a node that cannot be reached). */
export interface Range {
	start: number
	end: number
	node: FakeNode | Refused
}

/**
 * What a script answers: RESP text, `null` to close the connection,
 * `undefined` for the node's own answer, or one of those `delayed`. `''`
 * answers nothing, and nothing after it on that connection (commands are
 * answered in order).
 */
export type Script = (args: string[], node: FakeNode) => string | null | undefined | Delayed

/** An answer given `afterMs` after its command was read; the answers after it on its connection wait behind it. */
export interface Delayed {
	afterMs: number
	answer: string | null
}

/** `answer`, given `afterMs` late: a node slow to answer. */
export function delayed(afterMs: number, answer: string | null): Delayed {
	return { afterMs, answer }
}

export interface FakeNode {
	address: string
	port: number
	/** Every command read, in order, as its words. */
	seen: string[][]
	/** The commands named `name` (a `CLUSTER` one by its subcommand too: `CLUSTER SLOTS`). */
	count(name: string): number
	/** Who serves what: `CLUSTER SLOTS` answers it; a keyed command for a slot served elsewhere answers `MOVED`. */
	layout: Range[]
	/** Answers first; `undefined` leaves the command to the node's own answer. */
	script: Script | undefined
	/** What it answers `HELLO` (`HELLO` unless set: `HELLO_HANDOVER` for a node that can hand leases over). */
	hello: string
	/** Connections open now. */
	openConnections(): number
	/** Closes every connection, keeps listening. */
	drop(): void
	/** Closes every connection and stops listening: dialling it is refused. */
	close(): void
}

export const HELLO = '%1\r\n+server\r\n+holdline\r\n'
/** A node that can hand leases over and take them (`handover` = 1). */
export const HELLO_HANDOVER = '%2\r\n+server\r\n+holdline\r\n+handover\r\n:1\r\n'
const CLUSTER_DISABLED = '-ERR This instance has cluster support disabled\r\n'

/** The key a keyed command routes by: `GET row`'s row, else the key after the lock name. */
export function routeKey(args: string[]): string | undefined {
	const name = args[0]?.toUpperCase()
	if (name === 'GET') return args[1]
	if (name === 'HOLD' || name === 'TRYHOLD' || name === 'INSPECT' || name === 'PUT' || name === 'OBSERVE' || name === 'REATTACH') return args[2]
	return undefined
}

/** A key whose slot is in `start..end`, starting with `prefix`. */
export function keyIn(start: number, end: number, prefix = 'k'): string {
	for (let i = 0; ; i++) {
		const slot = slotOf(`${prefix}${i}`)
		if (slot >= start && slot <= end) return `${prefix}${i}`
	}
}

const bulk = (text: string) => `$${Buffer.byteLength(text)}\r\n${text}\r\n`

/** `CLUSTER SLOTS`'s answer for `ranges`, as Redis writes it. */
export function slotsReply(ranges: Array<{ start: number; end: number; node: { port: number } }>): string {
	const parts = ranges.map(({ start, end, node }) => `*3\r\n:${start}\r\n:${end}\r\n*3\r\n${bulk('127.0.0.1')}:${node.port}\r\n${bulk(String(node.port).padStart(40, '0'))}`)
	return `*${ranges.length}\r\n${parts.join('')}`
}

/** The node's own answer: the map, `MOVED` for others' slots, else a grant or OK. */
function ownAnswer(args: string[], node: FakeNode): string {
	const name = args[0]!.toUpperCase()
	if (name === 'HELLO') return node.hello
	if (name === 'CLUSTER') return node.layout.length === 0 ? CLUSTER_DISABLED : slotsReply(node.layout)
	const key = routeKey(args)
	if (key !== undefined && node.layout.length > 0) {
		const slot = slotOf(key)
		const owner = node.layout.find(r => r.start <= slot && slot <= r.end)?.node
		if (owner === undefined) return '-CLUSTERDOWN Hash slot not served\r\n'
		if (owner !== node) return `-MOVED ${slot} ${owner.address}\r\n`
	}
	switch (name) {
		case 'HOLD':
		case 'TRYHOLD':
			return `*2\r\n:${node.seen.length}\r\n:${1000 + node.seen.length}\r\n`
		case 'INSPECT':
		case 'GET':
			return '_\r\n'
		case 'PING':
			return '+PONG\r\n'
		default:
			return '+OK\r\n'
	}
}

/** Reads whole commands (arrays of bulk strings) off `buffer`: those complete, and the bytes left. */
function commands(buffer: Buffer): { read: string[][]; rest: Buffer } {
	const read: string[][] = []
	let pos = 0
	for (;;) {
		const words: string[] = []
		let at = pos
		const line = () => {
			const end = buffer.indexOf('\r\n', at)
			if (end < 0) return undefined
			const text = buffer.toString('utf8', at, end)
			at = end + 2
			return text
		}
		const head = line()
		if (head === undefined) break
		const count = Number(head.slice(1))
		for (let i = 0; i < count; i++) {
			const length = line()
			if (length === undefined || buffer.length < at + Number(length.slice(1)) + 2) break
			words.push(buffer.toString('utf8', at, at + Number(length.slice(1))))
			at += Number(length.slice(1)) + 2
		}
		if (words.length < count) break
		read.push(words)
		pos = at
	}
	return { read, rest: buffer.subarray(pos) }
}

/** Starts a node on a free loopback port, serving nothing (a single node) until given a `layout`. */
export async function fakeNode(script?: Script): Promise<FakeNode> {
	const sockets = new Set<net.Socket>()
	const server = net.createServer(socket => {
		sockets.add(socket)
		socket.on('close', () => sockets.delete(socket))
		socket.on('error', () => {})
		let buffer: Buffer = Buffer.alloc(0)
		let stuck = false
		const give = (answer: string | null) => {
			stuck ||= answer === ''
			if (answer === null) socket.destroy()
			else if (!socket.destroyed && !stuck) socket.write(answer)
		}
		// Delayed answers, and those read after one, in order.
		let queued = 0
		let queue = Promise.resolve()
		socket.on('data', chunk => {
			const { read, rest } = commands(Buffer.concat([buffer, chunk]))
			buffer = rest
			for (const args of read) {
				node.seen.push(args)
				const scripted = node.script?.(args, node)
				const { afterMs, answer } = typeof scripted === 'object' && scripted !== null ? scripted : delayed(0, scripted === undefined ? ownAnswer(args, node) : scripted)
				if (afterMs === 0 && queued === 0) {
					give(answer)
					continue
				}
				queued++
				queue = queue
					.then(() => new Promise(resolve => setTimeout(resolve, afterMs)))
					.then(() => {
						queued--
						give(answer)
					})
			}
		})
	})
	server.listen(0, '127.0.0.1')
	await once(server, 'listening')
	const { port } = server.address() as net.AddressInfo
	const node: FakeNode = {
		address: `127.0.0.1:${port}`,
		port,
		seen: [],
		count: name => node.seen.filter(args => [args[0], `${args[0]} ${args[1]}`].includes(name)).length,
		layout: [],
		script,
		hello: HELLO,
		openConnections: () => [...sockets].filter(s => !s.destroyed).length,
		drop: () => {
			for (const s of sockets) s.destroy()
		},
		close: () => {
			node.drop()
			server.close()
		},
	}
	return node
}

/**
 * Closes what each test of the file started, after it, whatever happened.
 * Answers the function a test hands a node or a store to (it answers it back).
 */
export function closedAfterEach(): <T extends FakeNode | Store>(thing: T) => T {
	const started: Array<FakeNode | Store> = []
	afterEach(async () => {
		for (const thing of started.splice(0)) {
			if ('seen' in thing) thing.close()
			else await thing.close()
		}
	})
	return thing => {
		started.push(thing)
		return thing
	}
}
