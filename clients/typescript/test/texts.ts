/**
 * Test helper: the client-made texts every holdline client shares, read
 * from `clients/texts.json`, and assertions that an error is one of them.
 */

import assert from 'node:assert/strict'
import * as fs from 'node:fs'
import * as path from 'node:path'
import { HoldlineError, type ErrorKind } from '../src/index.js'
import { REPO } from './server.js'

interface Table {
	texts: Record<string, string>
	rules: { default_port: number; connect_timeout_ms: number; max_reply_bytes: number }
}

export const TABLE: Table = JSON.parse(fs.readFileSync(path.join(REPO, 'clients/texts.json'), 'utf8'))

/** Every placeholder but `{reason}`, which stands for the platform's own words. */
export type Values = Record<string, string>

/** The table's text `name` with `values` put in; `{reason}` stays as it is. */
export function tableText(name: string, values: Values = {}): string {
	const template = TABLE.texts[name]
	assert.ok(template !== undefined, `clients/texts.json has no text ${name}`)
	return template.replace(/\{(\w+)\}/g, (whole, field: string) => {
		if (field === 'reason') return whole
		const value = values[field]
		assert.ok(value !== undefined, `no value for {${field}} of ${name}`)
		return value
	})
}

/** Whether `message` is the table's text `name` with `values`, `{reason}` matching any text. */
export function isTableText(message: string, name: string, values: Values = {}): boolean {
	const parts = tableText(name, values).split('{reason}')
	const pattern = parts.map(p => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')
	return new RegExp(`^${pattern}$`, 's').test(message)
}

/** An `assert.rejects` / `assert.throws` check: a HoldlineError of `kind` whose message is the table's `name`. */
export function isText(kind: ErrorKind, name: string, values: Values = {}) {
	return (e: unknown) => {
		assert.ok(e instanceof HoldlineError, `a HoldlineError, not ${String(e)}`)
		assert.ok(isTableText(e.message, name, values), `${JSON.stringify(e.message)} is not texts.json ${name}: ${JSON.stringify(tableText(name, values))}`)
		assert.equal(e.kind, kind)
		return true
	}
}
