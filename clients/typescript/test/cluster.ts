/**
 * Test helper: a real cluster from `clients/testing/cluster.py` (a private
 * etcd and N `holdline serve --etcd` nodes on loopback), and plain
 * connections to one node (no routing) to look at what a node serves.
 */

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import * as path from 'node:path'
import { parseAddress } from '../src/address.js'
import { Connection } from '../src/connection.js'
import { RespError, type Arg, type Reply } from '../src/resp.js'
import { slotOf } from '../src/slots.js'
import { firstLine, REPO } from './server.js'

export interface ClusterNode {
	addr: string
	pid: number
	/** The ranges of slots it served when the cluster was ready. */
	slots: Array<[number, number]>
}

export interface Cluster {
	etcd: string
	nodes: ClusterNode[]
	/** A key whose slot node `i` served when the cluster was ready, starting with `prefix`. */
	keyOn(i: number, prefix?: string): string
	/** SIGKILLs node `i` by its pid, as every cluster test kills a node. */
	kill(i: number): void
	/** SIGTERMs node `i` by its pid: a planned leave, which hands its partitions over. */
	terminate(i: number): void
	/** Closes the script's stdin: it kills every node and etcd, and exits. */
	stop(): Promise<void>
}

/** Starts `python3 clients/testing/cluster.py ...args` and reads its one JSON line. */
export async function startCluster(args = ['--nodes', '3', '--partitions', '8', '--etcd-ttl', '2']): Promise<Cluster> {
	const script = path.join(REPO, 'clients/testing/cluster.py')
	const child = spawn('python3', [script, ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
	const exited = once(child, 'exit')
	const first = await firstLine(child)
	if (first === undefined) throw new Error('cluster.py exited before it printed its line')
	const { etcd, nodes } = JSON.parse(first) as { etcd: string; nodes: ClusterNode[] }
	return {
		etcd,
		nodes,
		keyOn(i, prefix = 'key') {
			const ranges = nodes[i]!.slots
			for (let n = 0; ; n++) {
				const slot = slotOf(`${prefix}${n}`)
				if (ranges.some(([start, end]) => start <= slot && slot <= end)) return `${prefix}${n}`
			}
		},
		kill(i) {
			process.kill(nodes[i]!.pid, 'SIGKILL')
		},
		terminate(i) {
			process.kill(nodes[i]!.pid, 'SIGTERM')
		},
		async stop() {
			if (child.exitCode !== null || child.signalCode !== null) return
			child.stdin.end()
			await exited
		},
	}
}

/** One command on a plain connection to `addr` (no routing: a `MOVED` comes back as it is). */
export async function plainCommand(addr: string, args: readonly Arg[]): Promise<Reply> {
	const connection = await Connection.open(parseAddress(addr), undefined, 5000)
	try {
		return await connection.send(args)
	} finally {
		connection.destroy()
	}
}

/** `INSPECT lock key` on a plain connection to `addr`: the reply's fields, or the error's whole line. */
export async function plainInspect(addr: string, lock: string, key: string): Promise<Map<string, Reply> | string | null> {
	const reply = await plainCommand(addr, ['INSPECT', lock, key])
	if (reply instanceof RespError) return `${reply.word} ${reply.text}`
	if (reply === null) return null
	if (!(reply instanceof Map)) throw new Error(`INSPECT answered ${String(reply)}`)
	return new Map([...reply].map(([k, v]) => [String(k), v]))
}
