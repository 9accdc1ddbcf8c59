package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Key layout. Every key of a flowlet's state starts with
//
//	"\x01state/" app "/" flowlet "/" kind name "\x00"
//
// where kind is 't' for a table and 'c' for a counter table; then the user
// key, escaped so that byte order is kept and no key is a prefix of another
// key's encoding (0x00 becomes 0x00 0xFF, and 0x00 0x01 ends the key); then
// the version: ^writePointer, big-endian, so the newest version comes first.
//
// Table values are 0x01 followed by the value, or 0x00 alone for a delete.
// Counter values are 'd' (a delta) or 'b' (a base folding every older
// delta) followed by an int64, little-endian.

const (
	kindTable   = 't'
	kindCounter = 'c'

	tagTombstone = 0x00
	tagValue     = 0x01
	tagDelta     = 'd'
	tagBase      = 'b'

	versionLen = 8
	termLen    = 2
)

// Prefix is the start of every key the state of all apps uses, outside the
// transaction log's "\x00tx/".
const Prefix = "\x01state/"

func appendEscaped(dst, key []byte) []byte {
	for _, b := range key {
		if b == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, b)
		}
	}
	return dst
}

func appendTerm(dst []byte) []byte { return append(dst, 0, 1) }

func appendVersion(dst []byte, wp uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, ^wp)
}

var errBadKey = errors.New("state: malformed stored key")

// splitKey takes a stored key without its table prefix apart: the unescaped
// user key (appended to dst) and the version.
func splitKey(dst, k []byte) ([]byte, uint64, error) {
	if len(k) < termLen+versionLen {
		return dst, 0, errBadKey
	}
	wp := ^binary.BigEndian.Uint64(k[len(k)-versionLen:])
	k = k[:len(k)-versionLen]
	if k[len(k)-2] != 0 || k[len(k)-1] != 1 {
		return dst, 0, errBadKey
	}
	k = k[:len(k)-termLen]
	for i := 0; i < len(k); i++ {
		if k[i] == 0 {
			if i+1 >= len(k) || k[i+1] != 0xFF {
				return dst, 0, errBadKey
			}
			i++
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, k[i])
	}
	return dst, wp, nil
}

// encodedUserKey returns the stored key without table prefix and version: the
// part shared by every version of one user key.
func encodedUserKey(k []byte) []byte {
	if len(k) < versionLen {
		return k
	}
	return k[:len(k)-versionLen]
}

func encodeCount(tag byte, n int64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{tag}, uint64(n))
}

// decodeTable decodes a table value: the value and true, or a delete; one
// that does not decode is ErrDamaged.
func decodeTable(v []byte) ([]byte, bool, error) {
	switch {
	case len(v) == 1 && v[0] == tagTombstone:
		return nil, false, nil
	case len(v) > 0 && v[0] == tagValue:
		return v[1:], true, nil
	}
	return nil, false, ErrDamaged
}

// decodeCount decodes a counter value; one that does not decode is
// ErrDamaged, which callers wrap in a DamagedError naming its key.
func decodeCount(v []byte) (byte, int64, error) {
	if len(v) != 9 || (v[0] != tagDelta && v[0] != tagBase) {
		return 0, 0, ErrDamaged
	}
	return v[0], int64(binary.LittleEndian.Uint64(v[1:])), nil
}

// ErrDamaged is wrapped by the error of a read, or of a GC pass, that met a
// stored value that does not decode (a damaged store, or a stray write):
// see DamagedError.
var ErrDamaged = errors.New("damaged stored value")

// DamagedError names a stored version whose value does not decode. Reads
// of the key fail with it; GC leaves the key alone and reports it.
type DamagedError struct {
	Kind    string // "table" or "counters"
	Name    string // of the table or counter table
	Key     []byte // the user key
	Version uint64 // the write pointer of the damaged version
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("state: %s %q key %q version %d: %v", e.Kind, e.Name, e.Key, e.Version, ErrDamaged)
}

func (e *DamagedError) Unwrap() error { return ErrDamaged }

// damagedAt names stored key k (with the Store's prefix) in err if err is
// a value of it that does not decode.
func (s *Store) damagedAt(k []byte, err error) error {
	if errors.Is(err, ErrDamaged) {
		return s.damaged(k)
	}
	return err
}

// damaged is the DamagedError of stored key k (with the Store's prefix).
func (s *Store) damaged(k []byte) error {
	e := &DamagedError{}
	rest := bytes.TrimPrefix(k, s.prefix)
	if len(rest) == 0 {
		return e
	}
	e.Kind = "table"
	if rest[0] == kindCounter {
		e.Kind = "counters"
	}
	rest = rest[1:]
	name, user, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		e.Key = bytes.Clone(rest)
		return e
	}
	e.Name = string(name)
	var err error
	if e.Key, e.Version, err = splitKey(nil, user); err != nil {
		e.Key = bytes.Clone(user)
	}
	return e
}
