package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// memSample is one reading of a process's /proc/PID/status and /proc/PID/io.
type memSample struct {
	anon, file int64 // RssAnon, RssFile (bytes)
	written    int64 // write_bytes: bytes the process caused to be written to storage
}

// memTrace summarizes the samples of one run.
type memTrace struct {
	samples           []memSample
	maxAnon, maxFile  int64
	finalWritten, hwm int64
}

// anonAt returns the RssAnon of the first sample at or after fraction f of
// the bytes written.
func (t *memTrace) anonAt(f float64) int64 {
	target := int64(f * float64(t.finalWritten))
	for _, s := range t.samples {
		if s.written >= target {
			return s.anon
		}
	}
	return 0
}

func (t *memTrace) String() string {
	if len(t.samples) == 0 {
		return ""
	}
	return fmt.Sprintf("RssAnon at 25/50/75/100%% of %d MiB written: %d / %d / %d / %d MiB, max %d MiB; RssFile max %d MiB; VmHWM %d MiB (%d samples)",
		t.finalWritten>>20, t.anonAt(0.25)>>20, t.anonAt(0.5)>>20, t.anonAt(0.75)>>20, t.anonAt(1)>>20,
		t.maxAnon>>20, t.maxFile>>20, t.hwm>>20, len(t.samples))
}

// sampleMemory reads pid's memory figures every interval until the returned
// function is called (after the process ended); that function returns the
// trace. interval 0 disables sampling.
func sampleMemory(pid int, interval time.Duration) func() memTrace {
	if interval <= 0 {
		return func() memTrace { return memTrace{} }
	}
	done := make(chan struct{})
	out := make(chan memTrace, 1)
	go func() {
		var t memTrace
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			if s, hwm, ok := readProc(pid); ok {
				t.samples = append(t.samples, s)
				t.maxAnon = max(t.maxAnon, s.anon)
				t.maxFile = max(t.maxFile, s.file)
				t.finalWritten = max(t.finalWritten, s.written)
				t.hwm = max(t.hwm, hwm)
			}
			select {
			case <-done:
				out <- t
				return
			case <-tk.C:
			}
		}
	}()
	return func() memTrace { close(done); return <-out }
}

func readProc(pid int) (s memSample, hwm int64, ok bool) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, 0, false
	}
	for sc := bufio.NewScanner(bytes.NewReader(status)); sc.Scan(); {
		name, val, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		kb := func() int64 {
			f := strings.Fields(val)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n << 10
		}
		switch name {
		case "RssAnon":
			s.anon = kb()
		case "RssFile":
			s.file = kb()
		case "VmHWM":
			hwm = kb()
		}
	}
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for sc := bufio.NewScanner(bytes.NewReader(io)); sc.Scan(); {
			if v, found := strings.CutPrefix(sc.Text(), "write_bytes: "); found {
				s.written, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return s, hwm, s.anon > 0
}
