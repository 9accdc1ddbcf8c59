package badgerq

import "encoding/binary"

// Key layout (all big-endian, so byte order is numeric order). Every key
// starts with 'q', outside the tx package's reserved "\x00tx/" prefix.
//
//	qn                                    next queue id (uint32)
//	qm <name>                             queue metadata (JSON: id, config, groups)
//	qe <qid:4> <part:2> <255-prio:1> <wp:8> <chunk:4> <count:4> <bytes:4> <ms:8>
//	                                      packed entry: count events of one
//	                                      producer tx, partition and priority
//	qs <qid:4> <gid:2> <part:2>           cursor state of one group and partition
//
// Entries sort by partition, then highest priority first, then producer write
// pointer: a consumer reads a partition front to back. The entry key carries
// its event count, payload bytes and enqueue time, so eviction, TTL, depth and
// lag work on keys alone without reading values from the value log.
const (
	entryKeyLen  = 2 + 4 + 2 + 1 + 8 + 4 + 4 + 4 + 8
	stateKeyLen  = 2 + 4 + 2 + 2
	levelPfxLen  = 2 + 4 + 2 + 1
	partPfxLen   = 2 + 4 + 2
	queuePfxLen  = 2 + 4
	entryPosLen  = levelPfxLen + 8 + 4 // up to the chunk: a seek position
	maxPriorInv  = 255
	metaPrefix   = "qm"
	nextIDKey    = "qn"
	entryTag     = "qe"
	stateTag     = "qs"
	stateGrpPLen = 2 + 4 + 2
)

type entryKey struct {
	qid         uint32
	part        uint16
	prio        uint8
	wp          uint64
	chunk       uint32
	count, size uint32
	ms          int64
}

func (k *entryKey) encode(dst []byte) []byte {
	dst = append(dst, entryTag...)
	dst = binary.BigEndian.AppendUint32(dst, k.qid)
	dst = binary.BigEndian.AppendUint16(dst, k.part)
	dst = append(dst, maxPriorInv-k.prio)
	dst = binary.BigEndian.AppendUint64(dst, k.wp)
	dst = binary.BigEndian.AppendUint32(dst, k.chunk)
	dst = binary.BigEndian.AppendUint32(dst, k.count)
	dst = binary.BigEndian.AppendUint32(dst, k.size)
	return binary.BigEndian.AppendUint64(dst, uint64(k.ms))
}

func decodeEntryKey(b []byte) (k entryKey, ok bool) {
	if len(b) != entryKeyLen || string(b[:2]) != entryTag {
		return k, false
	}
	k.qid = binary.BigEndian.Uint32(b[2:])
	k.part = binary.BigEndian.Uint16(b[6:])
	k.prio = maxPriorInv - b[8]
	k.wp = binary.BigEndian.Uint64(b[9:])
	k.chunk = binary.BigEndian.Uint32(b[17:])
	k.count = binary.BigEndian.Uint32(b[21:])
	k.size = binary.BigEndian.Uint32(b[25:])
	k.ms = int64(binary.BigEndian.Uint64(b[29:]))
	return k, true
}

func queuePrefix(qid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(entryTag), qid)
}

func partPrefix(qid uint32, part uint16) []byte {
	return binary.BigEndian.AppendUint16(queuePrefix(qid), part)
}

func levelPrefix(qid uint32, part uint16, prio uint8) []byte {
	return append(partPrefix(qid, part), maxPriorInv-prio)
}

// entrySeek is the smallest key at or after (wp, chunk) in a level.
func entrySeek(qid uint32, part uint16, prio uint8, wp uint64, chunk uint32) []byte {
	b := binary.BigEndian.AppendUint64(levelPrefix(qid, part, prio), wp)
	return binary.BigEndian.AppendUint32(b, chunk)
}

func stateKey(qid uint32, gid, part uint16) []byte {
	b := binary.BigEndian.AppendUint32([]byte(stateTag), qid)
	b = binary.BigEndian.AppendUint16(b, gid)
	return binary.BigEndian.AppendUint16(b, part)
}

func stateQueuePrefix(qid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(stateTag), qid)
}

func stateGroupPrefix(qid uint32, gid uint16) []byte {
	return binary.BigEndian.AppendUint16(stateQueuePrefix(qid), gid)
}

func metaKey(name string) []byte { return append([]byte(metaPrefix), name...) }
