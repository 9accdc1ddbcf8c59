package pluginhost

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestLogWriterLongLine: a plugin that writes to stderr without newlines
// (binary garbage, a huge dump) must not make the host buffer all of it:
// go-plugin hands a long line over in 64 KiB pieces without the newline,
// and so does the stdio stream. Both writers log it in bounded pieces.
func TestLogWriterLongLine(t *testing.T) {
	lw := newLogWriter(slog.New(slog.NewTextHandler(io.Discard, nil)))
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for _, w := range []io.Writer{lw, lw.sync()} {
		for range 64 { // 4 MiB, no newline
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
	}
	sw := lw.sync()
	sw.Write(chunk)
	sw.Write(chunk)
	if len(lw.buf) > maxLogLine || len(sw.buf) > maxLogLine {
		t.Fatalf("pending line of %d and %d bytes, want at most %d", len(lw.buf), len(sw.buf), maxLogLine)
	}
	tail := lw.tail()
	if !strings.HasPrefix(tail, "xxx") || len(tail) > tailLines*(maxLogLine+1) {
		t.Fatalf("tail of %d bytes", len(tail))
	}
}
