// Package builtin registers flowrun's built-in edge flowlets with
// flowlet.Register: sources that bring data into an app and sinks that take
// results out. Import it for its side effect:
//
//	import _ "github.com/flowrun/flowrun/runtime/builtin"
//
// Types (config fields in parentheses; specs/guarantees.md says exactly what
// each guarantees):
//
//   - file_source (path, follow, max_line_bytes, lines_per_step): reads a
//     file line by line; its byte offset commits with the lines it emitted.
//   - stdin_source (max_line_bytes, lines_per_step): lines from standard input;
//     a graceful stop commits the lines it read ahead (runtime.StopDrainer).
//   - generator (count, rate, payload, keys, batch): numbered synthetic events.
//   - http_source (addr, path, split, max_body_bytes): POST bodies to
//     exactly path become events; the response comes after the commit. addr
//     (default 127.0.0.1:8080) needs a host: every interface only when
//     written out (0.0.0.0:8080), as the source takes no token. A request
//     of more than MaxRequestEvents lines is refused whole (413).
//   - file_sink (path, fsync): appends each event's payload and "\n" to a
//     file, only after commit, idempotently after a crash.
//   - stdout_sink: writes each event's payload and "\n" to standard output
//     after commit.
package builtin

import (
	"encoding/binary"

	"github.com/flowrun/flowrun/flowlet"
)

// Position tables: every source keeps its position in its state table
// "position" under key "pos" (8 bytes, big-endian), so that the position
// commits with the events.
const (
	posTable = "position"
)

var posKey = []byte("pos")

func getU64(t flowlet.Table, key []byte) (uint64, error) {
	v, ok, err := t.Get(key)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) < 8 {
		return 0, nil
	}
	return binary.BigEndian.Uint64(v), nil
}

func putU64(t flowlet.Table, key []byte, n uint64) error {
	return t.Put(key, binary.BigEndian.AppendUint64(nil, n))
}

// deadLetterer is the runtime's optional context extension (runtime.DeadLetterer).
type deadLetterer interface {
	DeadLetter(payload []byte, reason string) error
}
