/**
 * One-off commands (`STATS`, `PUT`, `GET`, `INSPECT`): sent on a free
 * connection of the pool, which goes back to it once answered. The server
 * answers these at once, so one unanswered for the connect timeout means
 * a dead link: that connection is closed and the command fails `closed`.
 */

import { ConnectionSilent, type Connection } from './connection.js'
import { now } from './duration.js'
import { errorFor, fromServer } from './errors.js'
import type { Pool } from './pool.js'
import { RespError, type Arg, type Reply } from './resp.js'
import { connectionClosed, connectionClosedKey, connectSilent } from './texts.js'

/**
 * Sends `args` and answers the reply; an error reply rejects with the
 * server's text. `lock` and `key` name what the command is about in the
 * texts of the errors this client makes.
 */
export async function request(pool: Pool, args: readonly Arg[], lock?: string, key?: string): Promise<Reply> {
	const reply = await exchange(pool, args, lock, key)
	if (reply instanceof RespError) throw fromServer(reply.word, reply.text)
	return reply
}

/**
 * As `request`, but an error reply is answered as a `RespError` value (a
 * `MOVED` to follow, say). `withinMs`: all of it, a new connection's
 * dialling and `HELLO` included, within that time (else the connect
 * timeout for each).
 */
export async function exchange(pool: Pool, args: readonly Arg[], lock?: string, key?: string, withinMs?: number): Promise<Reply> {
	const storeClosed = () => errorFor('closed', 'the store is closed', lock, key)
	if (pool.closed) throw storeClosed()
	const startedAt = now()
	let connection: Connection
	try {
		connection = await pool.take(withinMs)
	} catch (e) {
		if (pool.closed) throw storeClosed()
		throw e
	}
	// In use: keeps the process alive until the answer comes.
	connection.busy(60_000)
	const timeoutMs = withinMs ?? pool.connectTimeoutMs
	let silent = false
	const timer = setTimeout(
		() => {
			silent = true
			connection.destroy(new ConnectionSilent('the server answered nothing'))
		},
		Math.max(1, timeoutMs - (withinMs === undefined ? 0 : now() - startedAt)),
	)
	let reply: Reply
	try {
		reply = await connection.send(args)
	} catch (cause) {
		if (pool.closed) throw Object.assign(storeClosed(), { cause })
		if (silent) throw Object.assign(connectSilent(pool.where, timeoutMs), { cause })
		const closed = lock !== undefined && key !== undefined ? connectionClosedKey(lock, key) : connectionClosed()
		throw Object.assign(closed, { cause })
	} finally {
		clearTimeout(timer)
		pool.giveBack(connection)
	}
	return reply
}
