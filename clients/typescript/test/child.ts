/**
 * Test helper: a node script in a process of its own that reports one JSON
 * object a line (both ends: running it, and reporting from it), and a
 * program run to its end.
 */

import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { HoldlineError } from '../src/index.js'
import { PATIENCE_MS } from './server.js'

/** One line a script reported. */
export type Report = Record<string, unknown>

export interface Reporter {
	child: ChildProcess
	/** Every line reported so far, in order. */
	lines: Report[]
	/** The first reported line with `field` (its value, as the script and the test agree it is), within `ms` (PATIENCE_MS unless given). */
	next<T = unknown>(field: string, ms?: number): Promise<T>
	/** The exit code, once it exited. */
	exited: Promise<number | null>
}

/** Runs `dist/test/<script>` (a sibling of this file) with `args`. */
export function runScript(script: string, args: string[]): Reporter {
	const file = fileURLToPath(new URL(`./${script}`, import.meta.url))
	const child = spawn(process.execPath, [file, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
	const lines: Report[] = []
	const waiting: Array<() => void> = []
	createInterface({ input: child.stdout }).on('line', line => {
		lines.push(JSON.parse(line))
		for (const wake of waiting.splice(0)) wake()
	})
	const exited = new Promise<number | null>(resolve => child.on('exit', code => resolve(code)))
	async function next<T>(field: string, ms = PATIENCE_MS): Promise<T> {
		const deadline = Date.now() + ms
		for (;;) {
			const found = lines.find(l => field in l)
			if (found) return found[field] as T
			if (Date.now() > deadline) throw new Error(`${script} never reported ${field}; got ${JSON.stringify(lines)}`)
			await new Promise<void>(r => {
				waiting.push(r)
				setTimeout(r, 100)
			})
		}
	}
	return { child, lines, next, exited }
}

/** In a script: reports `o` to the test that runs it, as one line. */
export const report = (o: Report) => process.stdout.write(`${JSON.stringify(o)}\n`)

/** In a script: an error as it reports it, a HoldlineError's kind and text, else the text. */
export const errorReport = (e: unknown) => (e instanceof HoldlineError ? { kind: e.kind, message: e.message } : { message: String(e) })

/** The package's entry, for a program to import. */
export const INDEX_URL = new URL('../src/index.js', import.meta.url).href

/**
 * Runs `program` (an ES module's text) in a node process of its own and
 * asserts that it exits by itself within PATIENCE_MS, with code 0 and
 * nothing on stderr; answers what it printed.
 */
export async function runProgram(program: string): Promise<string> {
	const child = spawn(process.execPath, ['--input-type=module', '-e', program], { stdio: ['ignore', 'pipe', 'pipe'] })
	let out = ''
	let err = ''
	child.stdout.on('data', d => (out += d))
	child.stderr.on('data', d => (err += d))
	const timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS)
	const [code, signal] = await new Promise<[number | null, string | null]>(r => child.on('exit', (c, s) => r([c, s])))
	clearTimeout(timer)
	assert.equal(signal, null, `it exited by itself, not killed after ${PATIENCE_MS / 1000} s`)
	assert.equal(err, '')
	assert.equal(code, 0)
	return out
}
