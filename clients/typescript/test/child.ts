/** Test helper: a node script in a process of its own that reports one JSON object a line. */

import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

export interface Reporter {
	child: ChildProcess
	/** Every line reported so far, in order. */
	lines: Record<string, any>[]
	/** The first reported line with `field` (its value), within `ms` (20 s unless given). */
	next(field: string, ms?: number): Promise<any>
	/** The exit code, once it exited. */
	exited: Promise<number | null>
}

/** Runs `dist/test/<script>` (a sibling of this file) with `args`. */
export function runScript(script: string, args: string[]): Reporter {
	const file = fileURLToPath(new URL(`./${script}`, import.meta.url))
	const child = spawn(process.execPath, [file, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
	const lines: Record<string, any>[] = []
	const waiting: Array<() => void> = []
	createInterface({ input: child.stdout! }).on('line', line => {
		lines.push(JSON.parse(line))
		for (const wake of waiting.splice(0)) wake()
	})
	const exited = new Promise<number | null>(resolve => child.on('exit', code => resolve(code)))
	async function next(field: string, ms = 20_000): Promise<any> {
		const deadline = Date.now() + ms
		for (;;) {
			const found = lines.find(l => field in l)
			if (found) return found[field]
			if (Date.now() > deadline) throw new Error(`${script} never reported ${field}; got ${JSON.stringify(lines)}`)
			await new Promise<void>(r => {
				waiting.push(r)
				setTimeout(r, 100)
			})
		}
	}
	return { child, lines, next, exited }
}
