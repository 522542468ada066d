/**
 * Where a server listens, read from the forms every holdline client
 * accepts: `host`, `host:port`, `[ipv6]:port` (port 7380 when none is
 * given) and `redis://[:token@]host[:port]`, whose password is the token,
 * or `rediss://...` for the same over TLS. Anything else fails `invalid` at
 * once, naming the address.
 */

import { badAddress } from './texts.js'

/** Where a server listens, and the token an address URL carried. */
export interface Address {
	host: string
	port: number
	/** The token of `redis://:TOKEN@host`, when the address had one. */
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

/** Reads an address in one of the accepted forms; throws `badAddress` for anything else. */
export function parseAddress(text: unknown): Address {
	if (typeof text !== 'string') throw badAddress(String(text))
	const bad = () => badAddress(text)
	if (!text.includes('://')) return hostPort(text) ?? throwIt(bad())
	const scheme = /^rediss?:\/\//.exec(text)?.[0]
	if (scheme === undefined) throw bad()
	let rest = text.slice(scheme.length)
	let token: string | undefined
	const at = rest.lastIndexOf('@')
	if (at >= 0) {
		const userinfo = rest.slice(0, at)
		// Only the password form `:token`: the server knows one user.
		if (!userinfo.startsWith(':') || userinfo.length < 2) throw bad()
		try {
			token = decodeURIComponent(userinfo.slice(1))
		} catch {
			throw bad()
		}
		rest = rest.slice(at + 1)
	}
	const address: Address = hostPort(rest) ?? throwIt(bad())
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
