/**
 * The modules of `src/` form no import cycle: each imports only modules
 * below it, so each can be read (and tested) without those above it. Type
 * imports count too; the layers are listed in the README.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as fs from 'node:fs'
import * as path from 'node:path'
import { REPO } from './server.js'

const SRC = path.join(REPO, 'clients/typescript/src')

/** Every `import ... from './x.js'` and `export ... from './x.js'` of each module, by module name. */
function importGraph(dir: string): Map<string, string[]> {
	const graph = new Map<string, string[]>()
	for (const file of fs
		.readdirSync(dir)
		.filter(f => f.endsWith('.ts'))
		.sort()) {
		const text = fs.readFileSync(path.join(dir, file), 'utf8')
		const targets = [...text.matchAll(/^\s*(?:import|export)\b[^;'"]*?\bfrom\s+['"]\.\/([\w.-]+)\.js['"]/gm)].map(m => m[1]!)
		// Also `import './x.js'` for its effects alone.
		targets.push(...[...text.matchAll(/^\s*import\s+['"]\.\/([\w.-]+)\.js['"]/gm)].map(m => m[1]!))
		graph.set(file.replace(/\.ts$/, ''), [...new Set(targets)].sort())
	}
	return graph
}

/** A cycle in `graph` as a path `a -> b -> ... -> a`, or `undefined` when there is none. */
function findCycle(graph: Map<string, string[]>): string[] | undefined {
	const state = new Map<string, 'open' | 'done'>()
	const stack: string[] = []
	const visit = (node: string): string[] | undefined => {
		if (state.get(node) === 'done') return undefined
		if (state.get(node) === 'open') return [...stack.slice(stack.indexOf(node)), node]
		state.set(node, 'open')
		stack.push(node)
		for (const next of graph.get(node) ?? []) {
			const cycle = visit(next)
			if (cycle) return cycle
		}
		stack.pop()
		state.set(node, 'done')
		return undefined
	}
	for (const node of graph.keys()) {
		const cycle = visit(node)
		if (cycle) return cycle
	}
	return undefined
}

test('the cycle finder finds a cycle and passes a layered graph', () => {
	const cyclic = new Map([
		['a', ['b']],
		['b', ['c']],
		['c', ['a']],
		['d', ['a']],
	])
	assert.deepEqual(findCycle(cyclic), ['a', 'b', 'c', 'a'])
	assert.equal(
		findCycle(
			new Map([
				['a', ['b', 'c']],
				['b', ['c']],
				['c', []],
			]),
		),
		undefined,
	)
})

test('no import cycle among the modules of src/', () => {
	const graph = importGraph(SRC)
	// The parser sees the imports: index re-exports the public modules, store imports lock.
	assert.ok(graph.get('index')?.includes('store'), `index's imports: ${graph.get('index')}`)
	assert.ok(graph.get('store')?.includes('lock'), `store's imports: ${graph.get('store')}`)
	for (const [module, targets] of graph) {
		for (const target of targets) assert.ok(graph.has(target), `${module} imports ./${target}.js, which is not in src/`)
	}
	const cycle = findCycle(graph)
	assert.equal(cycle, undefined, `an import cycle: ${cycle?.join(' -> ')}`)
})
