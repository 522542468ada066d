/**
 * Test helper: certificates made at test time with the `openssl` command:
 * a CA of the test's own, and leaves it signs for 127.0.0.1 and localhost,
 * a server's (serverAuth) or a client's (clientAuth).
 *
 * What each needs so that rustls (the server) and OpenSSL (Node) accept
 * it: the CA a CommonName, basicConstraints CA:TRUE and keyCertSign; a
 * leaf a CommonName, both names as subjectAltName, its extended key usage,
 * and the key identifiers.
 */

import { execFileSync } from 'node:child_process'
import * as fs from 'node:fs'
import * as os from 'node:os'
import * as path from 'node:path'
import type * as tls from 'node:tls'
import { after, before } from 'node:test'
import { startServer, type Server } from './server.js'

const LEAF_EXTENSIONS = (usage: string) => `basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = ${usage}
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
`

const NEW_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']

function openssl(args: string[]): void {
	try {
		execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] })
	} catch (e) {
		const { stderr, code } = e as { stderr?: Buffer; code?: string }
		if (code === 'ENOENT') throw new Error('the TLS tests make their certificates with `openssl`: install it')
		throw new Error(`openssl ${args.join(' ')}: ${stderr?.toString() ?? String(e)}`)
	}
}

/** A certificate's PEM file and its key's. */
export interface Pair {
	cert: string
	key: string
}

/** A folder of its own for one test's certificates; removed by `removeFolder`. */
export function certFolder(): string {
	return fs.mkdtempSync(path.join(os.tmpdir(), 'holdline-tls-'))
}

export function removeFolder(folder: string): void {
	fs.rmSync(folder, { recursive: true, force: true })
}

/** A certificate authority of one test, its files in `folder`. */
export class Ca {
	readonly cert: string
	readonly key: string
	#serial = 0

	constructor(
		readonly folder: string,
		readonly name = 'ca',
	) {
		this.cert = path.join(folder, `${name}.pem`)
		this.key = path.join(folder, `${name}.key`)
		openssl([
			'req',
			'-x509',
			...NEW_KEY,
			'-keyout',
			this.key,
			'-out',
			this.cert,
			'-days',
			'2',
			'-subj',
			`/CN=holdline test ${name}`,
			'-addext',
			'basicConstraints = critical, CA:TRUE',
			'-addext',
			'keyUsage = critical, keyCertSign, cRLSign',
		])
	}

	/** A new leaf for 127.0.0.1 and localhost: a server's, or a client's. */
	leaf(client = false): Pair {
		this.#serial += 1
		const base = path.join(this.folder, `${this.name}-${client ? 'client' : 'server'}-${this.#serial}`)
		fs.writeFileSync(`${base}.ext`, LEAF_EXTENSIONS(client ? 'clientAuth' : 'serverAuth'))
		const pair = { cert: `${base}.pem`, key: `${base}.key` }
		openssl(['req', ...NEW_KEY, '-keyout', pair.key, '-out', `${base}.csr`, '-subj', '/CN=localhost'])
		openssl(['x509', '-req', '-in', `${base}.csr`, '-CA', this.cert, '-CAkey', this.key, '-set_serial', String(this.#serial), '-days', '2', '-extfile', `${base}.ext`, '-out', pair.cert])
		return pair
	}

	/** Options of `tls.connect` that trust this CA only; with a client leaf of this CA's when `client`. */
	trusting(client = false): tls.ConnectionOptions {
		const options: tls.ConnectionOptions = { ca: fs.readFileSync(this.cert) }
		if (client) {
			const pair = this.leaf(true)
			options.cert = fs.readFileSync(pair.cert)
			options.key = fs.readFileSync(pair.key)
		}
		return options
	}
}

/** The flags of `holdline serve` for a server certificate of `ca`, and more. */
export function tlsFlags(ca: Ca, ...more: string[]): string[] {
	const pair = ca.leaf()
	return ['--tls-cert', pair.cert, '--tls-key', pair.key, ...more]
}

/** What `sharedTlsServers` shares: a CA, a TLS server with a leaf of it, and a plain server. */
export interface TlsServers {
	ca: Ca
	server: Server
	plain: Server
}

/**
 * Makes a CA (in a folder of its own) and starts a TLS server with a leaf
 * of it and a plain server before the file's first test; stops both and
 * removes the folder after its last: read the fields inside tests, once
 * `before` has set them.
 */
export function sharedTlsServers(): TlsServers {
	const shared: Partial<TlsServers> = {}
	before(async () => {
		shared.ca = new Ca(certFolder())
		shared.server = await startServer(tlsFlags(shared.ca))
		shared.plain = await startServer()
	})
	after(async () => {
		await shared.server?.stop()
		await shared.plain?.stop()
		if (shared.ca) removeFolder(shared.ca.folder)
	})
	return shared as TlsServers
}
