/**
 * Test helper: `clients/testing/frozen_proxy.py`, a TCP forwarder that
 * SIGSTOP freezes with its sockets open (a stalled switch, as each end
 * sees it) and SIGCONT thaws.
 */

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import * as path from 'node:path'
import { createInterface } from 'node:readline'
import { REPO } from './server.js'

export interface Proxy {
	/** `127.0.0.1:PORT`: connect here to reach the target through the proxy. */
	address: string
	freeze(): void
	thaw(): void
	/** Thaws (a stopped process cannot die of SIGTERM) and ends the proxy. */
	stop(): Promise<void>
}

/** Starts a proxy in front of `target` (`host:port`). */
export async function startProxy(target: string): Promise<Proxy> {
	const script = path.join(REPO, 'clients/testing/frozen_proxy.py')
	const child = spawn('python3', [script, target], { stdio: ['ignore', 'pipe', 'inherit'] })
	const exited = once(child, 'exit')
	const lines = createInterface({ input: child.stdout! })
	const [first] = (await Promise.race([once(lines, 'line'), exited.then(() => [undefined])])) as [string | undefined]
	if (first === undefined || !/^\d+$/.test(first)) {
		child.kill('SIGKILL')
		throw new Error(`frozen_proxy.py did not print its port (got ${JSON.stringify(first)})`)
	}
	const signal = (s: NodeJS.Signals) => {
		if (child.exitCode === null && child.signalCode === null) child.kill(s)
	}
	return {
		address: `127.0.0.1:${first}`,
		freeze: () => signal('SIGSTOP'),
		thaw: () => signal('SIGCONT'),
		async stop() {
			if (child.exitCode !== null || child.signalCode !== null) return
			signal('SIGCONT')
			signal('SIGKILL')
			await exited
		},
	}
}
