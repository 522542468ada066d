/**
 * Where a server listens, read from the forms every holdline client
 * accepts: `host`, `host:port`, `[ipv6]:port` (port 7380 when none is
 * given) and `redis://[[user]:token@]host[:port]`, whose user name is the
 * user to connect as (`default` when none is given) and whose password is
 * its token, or `rediss://...` for the same over TLS. Anything else fails
 * `invalid` at once, naming the address.
 */

import { badAddress, badUser, userWithoutToken } from './texts.js'

/** Where a server listens, and the user and token an address URL carried. */
export interface Address {
	host: string
	port: number
	/** The user of `redis://USER:TOKEN@host`, when the address named one. */
	user?: string
	/** The token of `redis://[USER]:TOKEN@host`, when the address had one. */
	token?: string
	/** Present and true for a `rediss://` address: speak TLS. */
	tls?: true
}

/** The port `holdline serve` listens on unless told otherwise. */
export const DEFAULT_PORT = 7380

/** A host name or IPv4 address. */
const HOST = /^[A-Za-z0-9._-]+$/
/** An IPv6 address (the text inside its brackets), with an optional zone. */
const IPV6 = /^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9._-]+)?$/

/** A user name: 1 to 64 ASCII letters, digits or `_-.:@`. */
const USER = /^[A-Za-z0-9_.:@-]{1,64}$/

/** Whether `name` is a user name: 1 to 64 ASCII letters, digits or `_-.:@`. */
export function isUserName(name: unknown): name is string {
	return typeof name === 'string' && USER.test(name)
}

/** Who a connection says it is: `HELLO 3 AUTH USER TOKEN`. */
export interface Auth {
	/** `default` when no user was named. */
	user: string
	token: string
}

/**
 * The user and token to say: each the option's when given, else the first
 * address's; the user `default` when neither names one; `undefined` when
 * there is no token. Throws `badUser` for a user option outside the rule,
 * `userWithoutToken` for a user with no token.
 */
export function resolveAuth(first: Address, user: unknown, token: string | undefined): Auth | undefined {
	if (user !== undefined && !isUserName(user)) throw badUser(String(user))
	const name = user ?? first.user
	const secret = token ?? first.token
	if (secret === undefined) {
		if (name !== undefined) throw userWithoutToken(name)
		return undefined
	}
	return { user: name ?? 'default', token: secret }
}

/** Reads an address in one of the accepted forms; throws `badAddress` for anything else. */
export function parseAddress(text: unknown): Address {
	if (typeof text !== 'string') throw badAddress(String(text))
	const bad = () => badAddress(text)
	if (!text.includes('://')) return hostPort(text) ?? throwIt(bad())
	const scheme = /^rediss?:\/\//.exec(text)?.[0]
	if (scheme === undefined) throw bad()
	let rest = text.slice(scheme.length)
	let token: string | undefined
	let user: string | undefined
	const at = rest.lastIndexOf('@')
	if (at >= 0) {
		const userinfo = rest.slice(0, at)
		// `user:token`, or `:token` (the user `default`); a bare user name
		// would be a user without a password, which holdline has not.
		const colon = userinfo.indexOf(':')
		if (colon < 0 || colon === userinfo.length - 1) throw bad()
		try {
			token = decodeURIComponent(userinfo.slice(colon + 1))
			user = decodeURIComponent(userinfo.slice(0, colon)) || undefined
		} catch {
			throw bad()
		}
		if (user !== undefined && !isUserName(user)) throw bad()
		rest = rest.slice(at + 1)
	}
	const address: Address = hostPort(rest) ?? throwIt(bad())
	if (user !== undefined) address.user = user
	if (token !== undefined) address.token = token
	if (scheme === 'rediss://') address.tls = true
	return address
}

/**
 * The addresses of one or more nodes: one text with addresses separated by
 * commas, or a list of addresses; each in one of the accepted forms.
 */
export function parseAddresses(text: unknown): Address[] {
	const parts: unknown[] = Array.isArray(text) ? text : typeof text === 'string' ? text.split(',') : [text]
	if (parts.length === 0) throw badAddress('')
	return parts.map(parseAddress)
}

/** `host`, `host:port`, `[v6]` or `[v6]:port`; `undefined` for anything else. */
function hostPort(text: string): Address | undefined {
	const match = /^(?:\[([^\]]*)\]|([^:[\]]*))(?::([0-9]{1,5}))?$/.exec(text)
	if (!match) return undefined
	const [, v6, name, portText] = match
	if (v6 !== undefined ? !IPV6.test(v6) : !HOST.test(name ?? '')) return undefined
	const port = portText === undefined ? DEFAULT_PORT : Number(portText)
	if (port < 1 || port > 65535) return undefined
	return { host: v6 ?? name!, port }
}

function throwIt(error: Error): never {
	throw error
}

/** `host:port`, an IPv6 host in brackets: how the texts show a dialled address. */
export function showAddress({ host, port }: Address): string {
	return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}
