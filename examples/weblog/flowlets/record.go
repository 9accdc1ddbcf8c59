package flowlets

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/flowrun/flowrun/flowlet"
)

// Records on the parser's outputs. Every payload starts with a format
// version byte, so that a later format can tell events queued by this one.
//
//	pages, visitors, status:  0x01 uvarint(count) value
//	bytes:                    0x01 uvarint(lines) uvarint(bytes) hour(13)
//
// value is the normalised path, the HOST or the 3-digit status, verbatim; the
// parser sums one step's lines per value, so count ≥ 1.
const recordV1 = 0x01

// AppendCount appends a count record.
func AppendCount(dst []byte, count int64, value string) []byte {
	dst = append(dst, recordV1)
	dst = binary.AppendUvarint(dst, uint64(count))
	return append(dst, value...)
}

// DecodeCount decodes a count record. value aliases rec.
func DecodeCount(rec []byte) (count int64, value []byte, err error) {
	if len(rec) == 0 || rec[0] != recordV1 {
		return 0, nil, errBadRecord(rec)
	}
	c, n := binary.Uvarint(rec[1:])
	if n <= 0 || c == 0 || c > 1<<62 {
		return 0, nil, errBadRecord(rec)
	}
	return int64(c), rec[1+n:], nil
}

// AppendHour appends an hour record.
func AppendHour(dst []byte, lines, nbytes int64, hour []byte) []byte {
	dst = append(dst, recordV1)
	dst = binary.AppendUvarint(dst, uint64(lines))
	dst = binary.AppendUvarint(dst, uint64(nbytes))
	return append(dst, hour...)
}

// DecodeHour decodes an hour record. hour aliases rec.
func DecodeHour(rec []byte) (lines, nbytes int64, hour []byte, err error) {
	if len(rec) == 0 || rec[0] != recordV1 {
		return 0, 0, nil, errBadRecord(rec)
	}
	l, n := binary.Uvarint(rec[1:])
	if n <= 0 || l == 0 || l > 1<<62 {
		return 0, 0, nil, errBadRecord(rec)
	}
	b, m := binary.Uvarint(rec[1+n:])
	if m <= 0 || b > 1<<62 {
		return 0, 0, nil, errBadRecord(rec)
	}
	hour = rec[1+n+m:]
	if len(hour) != HourKeyLen {
		return 0, 0, nil, errBadRecord(rec)
	}
	return int64(l), int64(b), hour, nil
}

func errBadRecord(rec []byte) error {
	if len(rec) > 64 {
		rec = rec[:64]
	}
	return fmt.Errorf("weblog: not a weblog record (format %#x expected): %q", recordV1, rec)
}

// Counter keys. Counters and tables take keys of at most flowlet.MaxKeySize
// bytes, but a well-formed line may have a path or a HOST of up to 64 KiB.
// A value that fits is its own key, byte for byte; a longer one is keyed by
// LongKeyPrefix followed by the hex SHA-256 of the value, and its flowlet
// keeps the full value in its LongKeysTable under that key. The prefix byte
// 0xFF never occurs in valid UTF-8, and every value comes from a valid UTF-8
// line, so the two kinds of keys cannot collide.
const (
	LongKeyPrefix = "\xff"
	LongKeysTable = "long_keys"
)

// CounterKey returns the counter key of value (see LongKeyPrefix).
func CounterKey(value []byte) (key []byte, long bool) {
	if len(value) <= flowlet.MaxKeySize {
		return value, false
	}
	sum := sha256.Sum256(value)
	key = make([]byte, 0, len(LongKeyPrefix)+2*len(sum))
	key = append(key, LongKeyPrefix...)
	return hex.AppendEncode(key, sum[:]), true
}

// IsLongKey reports whether a counter key stands for a longer value.
func IsLongKey(key []byte) bool {
	return len(key) > 0 && key[0] == LongKeyPrefix[0]
}
