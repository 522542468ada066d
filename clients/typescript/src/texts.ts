/**
 * The texts this client makes itself when the network or the server fails
 * it. Every holdline client (Rust, Python, TypeScript, Go) words them the
 * same, byte for byte; `clients/texts.json` holds the table and the tests
 * compare each text made here with it.
 */

import { errorFor, showKey, type HoldlineError } from './errors.js'
import { showMs } from './duration.js'

/** The forms an address may take, as `badAddress` lists them. */
const ADDRESS_FORMS = 'host, host:port, [ipv6]:port or redis[s]://[[user]:token@]host[:port]'

/** An address that is none of the accepted forms (`invalid`). */
export function badAddress(address: string): HoldlineError {
	return errorFor('invalid', `bad address ${showKey(address)}: expected ${ADDRESS_FORMS}`)
}

/** A `user` option that is not 1 to 64 ASCII letters, digits or `_-.:@` (`invalid`). */
export function badUser(user: string): HoldlineError {
	return errorFor('invalid', `bad user name ${showKey(user)}: expected 1 to 64 ASCII letters, digits or _-.:@`)
}

/** A `user` option, and no token given anywhere (`invalid`). */
export function userWithoutToken(user: string): HoldlineError {
	return errorFor('invalid', `the user ${showKey(user)} was given without a token`)
}

/** Dialling failed; `reason` is the platform's own words (`closed`). */
export function cannotConnect(hostport: string, reason: string): HoldlineError {
	return errorFor('closed', `cannot connect to ${hostport} (${reason})`)
}

/**
 * The TLS handshake failed, or the server ended the connection with a TLS
 * alert before it answered `HELLO` (a refused client certificate under TLS
 * 1.3), or one side spoke TLS and the other plain text (`closed`).
 */
export function tlsFailed(hostport: string, reason: string): HoldlineError {
	return errorFor('closed', `TLS with ${hostport} failed (${reason})`)
}

/** Nothing came back from dialling and `HELLO` within the connect timeout (`closed`). */
export function connectSilent(hostport: string, timeoutMs: number): HoldlineError {
	return errorFor('closed', `the server at ${hostport} answered nothing for ${showMs(timeoutMs)}`)
}

/**
 * `HELLO` answered by another server (`invalid`): `server` is the name and
 * version it gave (`redis 7.0.15`), undefined when it named none.
 */
export function notHoldline(hostport: string, server: string | undefined): HoldlineError {
	if (server === undefined) return errorFor('invalid', `the server at ${hostport} is not holdline`)
	return errorFor('invalid', `the server at ${hostport} is ${server}, not holdline`)
}

/** The server sent bytes that are not RESP; `head` the first of them, 10 at most shown (`closed`). */
export function notResp(hostport: string, head: Buffer): HoldlineError {
	const shown = showKey(new TextDecoder().decode(head.subarray(0, 10)))
	return errorFor('closed', `the server at ${hostport} answered with something that is not RESP (${shown})`)
}

/** A reply's header announced `size` bytes, over the connection's `limit` (`closed`). */
export function replyTooLarge(hostport: string, size: bigint, limit: number): HoldlineError {
	return errorFor('closed', `the server at ${hostport} announced a reply of ${size} bytes, over the limit of ${limit}`)
}

/** `proclaim` after the leadership ended: resigned, or the campaign's function settled (`invalid`). */
export function proclaimEnded(lock: string, key: string): HoldlineError {
	return errorFor('invalid', 'proclaimed after the leadership ended', lock, key)
}

/** `HELLO` answered `NOAUTH`: the server wants a token and was given none (`invalid`). */
export function tokenMissing(): HoldlineError {
	return errorFor('invalid', 'the server wants a token')
}

/** `HELLO ... AUTH` answered `WRONGPASS` (`invalid`). */
export function tokenRefused(): HoldlineError {
	return errorFor('invalid', 'the server refused the token')
}

/**
 * `HELLO` answered with a refusal that is not about the token (the server
 * at its connection limit, say); `reply` is the reply's whole line (`closed`).
 */
export function connectRefused(hostport: string, reply: string): HoldlineError {
	return errorFor('closed', `the server at ${hostport} refused the connection (${reply})`)
}

/** A store command's connection closed before its answer (`closed`). */
export function connectionClosed(): HoldlineError {
	return errorFor('closed', 'the connection to the server closed')
}

/** A hold's connection closed before its grant (`closed`). */
export function connectionClosedKey(lock: string, key: string): HoldlineError {
	return errorFor('closed', 'the connection to the server closed', lock, key)
}

/** A held lease's connection closed (`lost`). */
export function lostConnection(lock: string, key: string): HoldlineError {
	return errorFor('lost', 'its connection to the server closed', lock, key)
}

/**
 * A held lease's connection answered nothing for the ttl less a margin
 * (`lost`): the server may give the key to the next in line from then on.
 */
export function lostSilent(lock: string, key: string, ttlMs: number): HoldlineError {
	return errorFor('lost', `the server answered nothing for its ttl (${showMs(ttlMs)})`, lock, key)
}

/** Nothing ended a hold within its whole wait plus `graceMs` of its call (`closed`): no answer, or retries that never got one. */
export function waitSilent(lock: string, key: string, waitMs: number, graceMs: number): HoldlineError {
	return errorFor('closed', `the server answered nothing for the hold's wait plus its ttl (${showMs(waitMs)} + ${showMs(graceMs)})`, lock, key)
}

/**
 * A lease told it moved (a planned hand-over) that could not re-attach on
 * its new node before its deadline, or that the new node had nothing for
 * (`lost`).
 */
export function reattachFailed(lock: string, key: string): HoldlineError {
	return errorFor('lost', 'it could not follow its partition to another node', lock, key)
}

/** A command still answered `MOVED` after 5 redirects: the nodes disagree about who serves its slot (`closed`). */
export function movedLoop(lock: string | undefined, key: string): HoldlineError {
	return errorFor('closed', 'redirected 5 times without reaching the node that serves it', lock, key)
}

/** A command answered `CLUSTERDOWN` 10 times over: no node took its slot over (`closed`). */
export function slotUnserved(lock: string | undefined, key: string, slot: number): HoldlineError {
	return errorFor('closed', `no node serves its slot (${slot}) after 10 tries`, lock, key)
}
