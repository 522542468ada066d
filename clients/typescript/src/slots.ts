/**
 * Which of the 16384 slots a key hashes to, exactly as Redis Cluster
 * (and `holdline serve --etcd`) hashes it: CRC16-XMODEM of the key's UTF-8
 * bytes mod 16384, only the bytes inside the first `{...}` when that holds
 * at least one byte (a hash tag: `{inv-7}` and `{inv-7}:status` share a slot).
 */

/** How many slots a cluster's keys are spread over. */
export const SLOTS = 16384

/** CRC16-XMODEM (polynomial 0x1021, initial 0), one byte at a time by table. */
const TABLE = (() => {
	const table = new Uint16Array(256)
	for (let byte = 0; byte < 256; byte++) {
		let crc = byte << 8
		for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
		table[byte] = crc
	}
	return table
})()

/** The CRC16-XMODEM of `bytes`. */
export function crc16(bytes: Uint8Array): number {
	let crc = 0
	for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff]!
	return crc
}

/** The slot of `key` (the KEY of a command, not the lock name). */
export function slotOf(key: string): number {
	let bytes: Uint8Array = Buffer.from(key, 'utf8')
	const open = bytes.indexOf(0x7b) // {
	if (open >= 0) {
		const close = bytes.indexOf(0x7d, open + 1) // }
		if (close > open + 1) bytes = bytes.subarray(open + 1, close)
	}
	return crc16(bytes) % SLOTS
}
