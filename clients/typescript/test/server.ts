/** Test helper: starts a real `holdline serve` on a port it binds itself, and stops it. */

import { spawn, type ChildProcess } from 'node:child_process'
import * as path from 'node:path'
import * as fs from 'node:fs'
import { fileURLToPath } from 'node:url'
import { once } from 'node:events'
import { createInterface } from 'node:readline'

/** This file is at clients/typescript/dist/test/: the repository is four folders up. */
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..')

/** `$HOLDLINE_BIN`, else `<repo>/target/release/holdline`. */
export function holdlineBin(): string {
	const bin = process.env.HOLDLINE_BIN || path.join(REPO, 'target/release/holdline')
	if (!fs.existsSync(bin)) throw new Error(`no holdline binary at ${bin}: build it (cargo build --release --bin holdline) or set HOLDLINE_BIN`)
	return bin
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
	const child = spawn(holdlineBin(), ['serve', '--listen', '127.0.0.1:0', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] })
	let stderr = ''
	child.stderr!.on('data', d => (stderr += d))
	const exited = once(child, 'exit')
	// It keeps reading stdout after the first line, so a later one (--metrics) never fills the pipe.
	const lines = createInterface({ input: child.stdout! })
	let timer: NodeJS.Timeout | undefined
	const [first] = (await Promise.race([
		once(lines, 'line'),
		exited.then(() => [undefined]),
		new Promise(resolve => (timer = setTimeout(resolve, 20_000, [undefined]))),
	]).finally(() => clearTimeout(timer))) as [string | undefined]
	const address = first?.match(LISTENING)?.[1]
	if (address === undefined) {
		child.kill('SIGKILL')
		throw new Error(`holdline serve did not say where it listens within 20s (its first line: ${JSON.stringify(first)}): ${stderr}`)
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
	const lines = createInterface({ input: child.stdout! })
	const [first] = (await Promise.race([once(lines, 'line'), exited.then(() => [undefined])])) as [string | undefined]
	if (first === undefined || !/^\d+$/.test(first)) {
		child.kill('SIGKILL')
		throw new Error(`python3 did not print the port it bound (got ${JSON.stringify(first)})`)
	}
	return {
		address: `127.0.0.1:${first}`,
		port: Number(first),
		async [Symbol.asyncDispose]() {
			child.stdin!.end()
			await exited
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
