package setnxlock

import "strings"

// Redis Cluster's key slots, computed on the client so that a group of
// keys (TryAcquireMany) that a Cluster could not lock in one transaction
// is refused before anything is written: a transaction, like a script,
// may only name keys of one slot (CROSSSLOT).

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// keySlot returns the Cluster slot of key, as CLUSTER KEYSLOT does: the
// CRC16 (XMODEM) of its hash tag, if it has one (hashTag), else of the
// whole key, modulo 16384.
func keySlot(key string) int {
	return int(crc16(hashTag(key)) % clusterSlots)
}

// hashTag returns the part of key Redis Cluster hashes: the bytes between
// the first '{' and the first '}' after it when there is at least one,
// else the whole key. A tag is always shorter than its key (hasHashTag).
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
