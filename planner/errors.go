package planner

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Position is a place in an app file. Line and Col are 1-based; 0 means
// unknown (yaml.v3 reports some syntax errors with a line but no column).
type Position struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

// String formats p as "file:line:col", dropping the parts that are unknown,
// like go/token does.
func (p Position) String() string {
	s := p.File
	if p.Line > 0 {
		s += ":" + strconv.Itoa(p.Line)
		if p.Col > 0 {
			s += ":" + strconv.Itoa(p.Col)
		}
	}
	if s == "" {
		s = "-"
	}
	return s
}

// Error is one problem found in an app file.
type Error struct {
	File      string
	Line, Col int
	Msg       string
}

// Error returns "file:line:col: msg".
func (e *Error) Error() string {
	return Position{e.File, e.Line, e.Col}.String() + ": " + e.Msg
}

// ErrorList is every problem found in an app file, sorted by position.
// Parse returns one whenever it fails, so callers can list all problems at
// once instead of fixing them one run at a time.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find an individual *Error (the first one).
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// errorSink collects errors while parsing; reporting never stops the parse,
// so one run reports everything.
type errorSink struct {
	list ErrorList
}

func (s *errorSink) add(pos Position, format string, args ...any) {
	s.list = append(s.list, &Error{File: pos.File, Line: pos.Line, Col: pos.Col, Msg: fmt.Sprintf(format, args...)})
}

func (s *errorSink) empty() bool { return len(s.list) == 0 }

// err returns the collected errors sorted by position, with exact duplicates
// removed (a YAML alias makes the same node, and its errors, appear twice).
func (s *errorSink) err() error {
	if len(s.list) == 0 {
		return nil
	}
	sort.SliceStable(s.list, func(i, j int) bool {
		a, b := s.list[i], s.list[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	out := s.list[:0:0]
	seen := make(map[Error]bool, len(s.list))
	for _, e := range s.list {
		if !seen[*e] {
			seen[*e] = true
			out = append(out, e)
		}
	}
	return out
}
