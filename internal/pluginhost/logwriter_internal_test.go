package pluginhost

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
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
	if !strings.HasPrefix(tail, "xxx") || len(tail) > tailLines*(maxTailLine+64) {
		t.Fatalf("tail of %d bytes", len(tail))
	}
}

// recorder keeps the records a logger handles.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// A JSON log line longer than go-plugin's 64 KiB pieces (an error logged
// with a big attribute) is still logged whole, at its level: split, it
// went out as text at Info, and vanished under --log-level warn. Its line
// in the tail kept for error messages is cut short.
func TestLogWriterLongJSONLine(t *testing.T) {
	rec := &recorder{}
	lw := newLogWriter(slog.New(rec))
	big := strings.Repeat("é", 100<<10)
	line := []byte(`{"level":"ERROR","msg":"bad event","payload":"` + big + `"}` + "\n")
	for len(line) > 0 { // as go-plugin hands it over
		n := min(len(line), 64<<10)
		lw.Write(line[:n])
		line = line[n:]
	}
	if len(rec.recs) != 1 || rec.recs[0].Level != slog.LevelError || rec.recs[0].Message != "plugin: bad event" {
		t.Fatalf("%d records, first %v %.80q", len(rec.recs), rec.recs[0].Level, rec.recs[0].Message)
	}
	if tail := lw.tail(); len(tail) > maxTailLine+64 || !utf8.ValidString(tail) || !strings.HasPrefix(tail, `{"level":"ERROR"`) {
		t.Fatalf("tail of %d bytes: %.100q", len(tail), tail)
	}
}
