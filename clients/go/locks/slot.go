package locks

import (
	"net"
	"strconv"
	"strings"
)

// slotCount is how many slots keys hash to, as in Redis Cluster.
const slotCount = 16384

// crcTable is CRC16-XMODEM's (polynomial 0x1021, initial value 0) table.
var crcTable = func() (table [256]uint16) {
	for i := range table {
		crc := uint16(i) << 8
		for bit := 0; bit < 8; bit++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		table[i] = crc
	}
	return table
}()

// crc16 is CRC16-XMODEM of text's bytes.
func crc16(text string) uint16 {
	var crc uint16
	for i := 0; i < len(text); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^text[i]]
	}
	return crc
}

// slotOf is the slot of a key, exactly as Redis Cluster computes it: the
// CRC16 of its bytes mod 16384, or of only the bytes between its first
// '{' and the first '}' after it when there is at least one between them
// (a hash tag: "{inv-7}:a" and "{inv-7}:b" share a slot). The lock's name
// takes no part.
func slotOf(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key)) % slotCount
}

// parseMoved reads "MOVED slot host:port" (an IPv6 host bare or in
// brackets) into the slot and the node's host:port.
func parseMoved(line string) (slot int, node string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[0] != "MOVED" {
		return 0, "", false
	}
	slot, err := strconv.Atoi(fields[1])
	colon := strings.LastIndexByte(fields[2], ':')
	if err != nil || slot < 0 || slot >= slotCount || colon < 0 {
		return 0, "", false
	}
	host := strings.TrimSuffix(strings.TrimPrefix(fields[2][:colon], "["), "]")
	port, err := strconv.Atoi(fields[2][colon+1:])
	node, ok = nodeName(host, port)
	return slot, node, ok && err == nil
}

func isClusterDown(line string) bool {
	word, _, _ := strings.Cut(line, " ")
	return word == "CLUSTERDOWN"
}

// nodeName is a node's host:port as dialled, from a host and a port that
// a server sent.
func nodeName(host string, port int) (string, bool) {
	if host == "" || port < 1 || port > 65535 {
		return "", false
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), true
}
