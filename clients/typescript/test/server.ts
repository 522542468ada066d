/**
 * Test helpers: a real `holdline serve` on a port it binds itself (alone,
 * with a file of its own, or shared with a store by a file's tests),
 * addresses that refuse or never answer, and the waits tests share.
 */

import { after, before } from 'node:test'
import { spawn, type ChildProcess } from 'node:child_process'
import * as path from 'node:path'
import * as fs from 'node:fs'
import * as net from 'node:net'
import * as os from 'node:os'
import type { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { connect, type Lock, type Store } from '../src/index.js'

/** This file is at clients/typescript/dist/test/: the repository is four folders up. */
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..')

/** How long a test waits for a process it started to say what it should, or to exit. */
export const PATIENCE_MS = 20_000

/** `$HOLDLINE_BIN`, else `<repo>/target/release/holdline`. */
export function holdlineBin(): string {
	const bin = process.env.HOLDLINE_BIN || path.join(REPO, 'target/release/holdline')
	if (!fs.existsSync(bin)) throw new Error(`no holdline binary at ${bin}: build it (cargo build --release --bin holdline) or set HOLDLINE_BIN`)
	return bin
}

/**
 * The first line `child` writes to stdout; undefined once it exits without
 * one, or after `ms` when given. Its stdout is read on after that line, so
 * a later one (`--metrics`) never fills the pipe.
 */
export async function firstLine(child: ChildProcess & { stdout: Readable }, ms?: number): Promise<string | undefined> {
	const lines = createInterface({ input: child.stdout })
	const line = once(lines, 'line').then(([first]) => first as string)
	const exited = once(child, 'exit').then(() => undefined)
	let timer: NodeJS.Timeout | undefined
	const timedOut = new Promise<undefined>(resolve => {
		if (ms !== undefined) timer = setTimeout(resolve, ms, undefined)
	})
	return await Promise.race([line, exited, timedOut]).finally(() => clearTimeout(timer))
}

export interface Server {
	/** `127.0.0.1:PORT` */
	address: string
	process: ChildProcess
	/** What the server wrote to stderr so far. */
	stderr(): string
	/** Sends `signal` (SIGTERM unless given) and resolves with the exit code. */
	stop(signal?: NodeJS.Signals): Promise<number | null>
}

const LISTENING = /^holdline: listening on (\S+)$/

/** Starts `holdline serve --listen 127.0.0.1:0 ...extra` and reads the address it bound from its first line. */
export async function startServer(extra: string[] = []): Promise<Server> {
	// SIGTERM drains for --drain-timeout: short, so stopping stays quick.
	const args = ['serve', '--listen', '127.0.0.1:0', '--drain-timeout', '100ms', ...extra]
	const child = spawn(holdlineBin(), args, { stdio: ['ignore', 'pipe', 'pipe'] })
	let stderr = ''
	child.stderr.on('data', d => (stderr += d))
	const exited = once(child, 'exit')
	const first = await firstLine(child, PATIENCE_MS)
	const address = first?.match(LISTENING)?.[1]
	if (address === undefined) {
		child.kill('SIGKILL')
		throw new Error(`holdline serve did not say where it listens within ${PATIENCE_MS / 1000}s (its first line: ${JSON.stringify(first)}): ${stderr}`)
	}
	return {
		address,
		process: child,
		stderr: () => stderr,
		async stop(signal = 'SIGTERM') {
			if (child.exitCode === null && child.signalCode === null) child.kill(signal)
			const [code] = await exited
			return code as number | null
		},
	}
}

/** Starts `holdline serve FLAG FILE ...extra`, FILE a file of its own holding `contents`; stopping the server removes the file. */
export async function startServerWithFile(flag: string, contents: string, extra: string[] = []): Promise<Server> {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'holdline-'))
	const remove = () => fs.rmSync(dir, { recursive: true })
	const file = path.join(dir, 'file')
	fs.writeFileSync(file, contents)
	const server = await startServer([flag, file, ...extra]).catch(e => {
		remove()
		throw e
	})
	return {
		...server,
		async stop(signal) {
			try {
				return await server.stop(signal)
			} finally {
				remove()
			}
		},
	}
}

/** A server and a store connected to it, which all the tests of a file use. */
export interface Shared {
	server: Server
	store: Store
}

/**
 * Starts a server and connects a store to it before the file's first test,
 * and closes both after its last: read the fields inside tests, once
 * `before` has set them.
 */
export function sharedServer(): Shared {
	const shared: Partial<Shared> = {}
	before(async () => {
		shared.server = await startServer()
		shared.store = await connect(shared.server.address)
	})
	after(async () => {
		await shared.store?.close()
		await shared.server?.stop()
	})
	return shared as Shared
}

/** An address where nothing listens, until disposed of. */
export interface Refused {
	/** `127.0.0.1:PORT` */
	address: string
	port: number
	[Symbol.asyncDispose](): Promise<void>
}

/**
 * A socket bound on loopback but not listening, until disposed of: dialling
 * it is refused, and no other process can take its port meanwhile, as one
 * could a port found free and let go. Node binds a TCP socket only to listen
 * or connect, so a python3 process holds it (until its stdin closes).
 */
export async function refusedAddress(): Promise<Refused> {
	const hold = 'import socket, sys\ns = socket.socket()\ns.bind(("127.0.0.1", 0))\nprint(s.getsockname()[1], flush=True)\nsys.stdin.read()\n'
	const child = spawn('python3', ['-c', hold], { stdio: ['pipe', 'pipe', 'inherit'] })
	const exited = once(child, 'exit')
	const first = await firstLine(child)
	if (first === undefined || !/^\d+$/.test(first)) {
		child.kill('SIGKILL')
		throw new Error(`python3 did not print the port it bound (got ${JSON.stringify(first)})`)
	}
	return {
		address: `127.0.0.1:${first}`,
		port: Number(first),
		async [Symbol.asyncDispose]() {
			child.stdin.end()
			await exited
		},
	}
}

/** A server on loopback that accepts connections and never answers, until disposed of. */
export interface Silent {
	/** `127.0.0.1:PORT` */
	address: string
	[Symbol.asyncDispose](): Promise<void>
}

export async function silentServer(): Promise<Silent> {
	const sockets: net.Socket[] = []
	const server = net.createServer(s => sockets.push(s))
	server.listen(0, '127.0.0.1')
	await once(server, 'listening')
	return {
		address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
		async [Symbol.asyncDispose]() {
			for (const s of sockets) s.destroy()
			server.close()
		},
	}
}

/** Resolves once `check` answers true, polling every 20 ms; rejects after `ms`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
	const deadline = Date.now() + ms
	while (!(await check())) {
		if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
		await new Promise(r => setTimeout(r, 20))
	}
}

export const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

/** A promise (`opened`) and the function that resolves it (`open`). */
export function gate<T = void>(): { open: (value: T) => void; opened: Promise<T> } {
	let open!: (value: T) => void
	const opened = new Promise<T>(r => (open = r))
	return { open, opened }
}

/** Holds `key` of `lock` until the function it answers is called; that function resolves once the hold has ended. */
export async function holdOpen(lock: Lock, key: string): Promise<() => Promise<void>> {
	const release = gate()
	const held = gate()
	const done = lock.hold(key, async () => {
		held.open()
		await release.opened
	})
	await held.opened
	return async () => {
		release.open()
		await done
	}
}

/**
 * Resolves once the lease's signal has aborted. Reading `lease.signal`
 * checks the clock and may abort it there and then, and a listener added to
 * an aborted signal never hears the event: so check first, as with any
 * AbortSignal.
 */
export function whenLost(lease: { readonly signal: AbortSignal }): Promise<void> {
	const signal = lease.signal
	if (signal.aborted) return Promise.resolve()
	return new Promise(resolve => signal.addEventListener('abort', () => resolve(), { once: true }))
}
