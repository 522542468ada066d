/** Test helper: starts a real `holdline serve` on a free port and stops it. */

import { spawn, type ChildProcess } from 'node:child_process'
import * as net from 'node:net'
import * as path from 'node:path'
import * as fs from 'node:fs'
import { fileURLToPath } from 'node:url'
import { once } from 'node:events'

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

async function freePort(): Promise<number> {
	const probe = net.createServer()
	probe.listen(0, '127.0.0.1')
	await once(probe, 'listening')
	const { port } = probe.address() as net.AddressInfo
	probe.close()
	await once(probe, 'close')
	return port
}

/** Starts `holdline serve --listen 127.0.0.1:PORT ...extra` and waits until it accepts connections. */
export async function startServer(extra: string[] = []): Promise<Server> {
	const port = await freePort()
	const address = `127.0.0.1:${port}`
	const child = spawn(holdlineBin(), ['serve', '--listen', address, ...extra], { stdio: ['ignore', 'ignore', 'pipe'] })
	let stderr = ''
	child.stderr!.on('data', d => (stderr += d))
	const exited = once(child, 'exit')
	const deadline = Date.now() + 20_000
	for (;;) {
		if (child.exitCode !== null) throw new Error(`holdline serve exited ${child.exitCode}: ${stderr}`)
		const ok = await new Promise<boolean>(resolve => {
			const s = net.connect(port, '127.0.0.1')
			s.once('connect', () => (s.destroy(), resolve(true)))
			s.once('error', () => resolve(false))
		})
		if (ok) break
		if (Date.now() > deadline) {
			child.kill('SIGKILL')
			throw new Error(`holdline serve did not listen on ${address} within 20s: ${stderr}`)
		}
		await new Promise(r => setTimeout(r, 50))
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
