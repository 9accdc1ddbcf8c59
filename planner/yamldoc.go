package planner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// readYAML parses src into a node tree and returns the document's root node,
// or nil if there is nothing to decode.
func (d *decoder) readYAML(src []byte) *yaml.Node {
	doc, second, err := decodeDocuments(src)
	if err != nil {
		d.syntaxError(src, err)
		if doc == nil {
			return nil
		}
	}
	if second != nil {
		d.errs.add(d.pos(second), "unexpected second YAML document: an app file holds exactly one")
	}
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(doc.Content[0]) {
		pos := Position{File: d.file, Line: 1, Col: 1}
		if doc != nil && doc.Line > 0 {
			pos = d.pos(doc)
		}
		d.errs.add(pos, "empty document: an app file needs at least app and flowlets")
		return nil
	}
	return doc.Content[0]
}

// decodeDocuments parses the first YAML document of src and peeks at a
// second one. doc is nil if src holds no document or the first is malformed;
// second is non-nil if there is a second document; err is the first syntax
// error.
func decodeDocuments(src []byte) (doc, second *yaml.Node, err error) {
	// yaml.v3 reports errors by panicking internally and recovering; guard
	// against a panic that escapes, since Parse must never panic.
	defer func() {
		if r := recover(); r != nil {
			doc, second, err = nil, nil, fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return &first, nil, nil
	case err != nil:
		return &first, nil, err
	}
	return &first, &extra, nil
}

var yamlLineError = regexp.MustCompile(`(?s)^yaml: (?:line (\d+): )?(.*)$`)

// splitYAMLError splits a yaml.v3 error into its line (0 if none) and
// message.
func splitYAMLError(err error) (line int, msg string) {
	m := yamlLineError.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, err.Error()
	}
	line, _ = strconv.Atoi(m[1])
	return line, m[2]
}

// syntaxError reports a yaml.v3 syntax error. yaml.v3 reports a parser
// error at the line before the start of the enclosing block rather than at
// the problem (an indentation slip on line 40 of a flowlet that starts at
// line 12 is reported at line 11), and some errors (an unknown anchor,
// invalid UTF-8) without a line at all. So the line is corrected when
// possible by finding the first line at which the file stops parsing with
// the same message. The column stays unknown.
func (d *decoder) syntaxError(src []byte, err error) {
	line, msg := splitYAMLError(err)
	if l := firstFailingLine(src, msg, max(line, 1)); l > 0 {
		line = l
	}
	pos := Position{File: d.file, Line: line}
	if col := leadingTab(src, line); col > 0 {
		pos.Col = col
		if !strings.Contains(msg, "tab") { // "found character that cannot start any token"
			msg += " (a tab in the indentation: YAML indents with spaces only)"
		}
	}
	d.errs.add(pos, "invalid YAML: %s", msg)
}

// leadingTab returns the column of a tab in the indentation of line n of
// src (1-based), or 0.
func leadingTab(src []byte, n int) int {
	if n < 1 {
		return 0
	}
	lines := bytes.SplitN(src, []byte("\n"), n+1)
	if len(lines) < n {
		return 0
	}
	for i, c := range lines[n-1] {
		switch c {
		case ' ':
		case '\t':
			return i + 1
		default:
			return 0
		}
	}
	return 0
}

// firstFailingLine returns the smallest n >= from such that the first n
// lines of src fail to parse with message msg, or 0 if there is none or the
// search gets expensive (it is quadratic; app files are small). from is the
// line yaml.v3 reported, which is never after the problem. Prefixes that end
// inside an unclosed construct fail with a different message and are
// skipped.
func firstFailingLine(src []byte, msg string, from int) int {
	budget := 1 << 20 // bytes to parse in total
	end := 0
	for n := 1; end < len(src); n++ {
		next := bytes.IndexByte(src[end:], '\n')
		if next < 0 {
			end = len(src)
		} else {
			end += next + 1
		}
		if n < from {
			continue
		}
		if budget -= end; budget < 0 {
			return 0
		}
		_, _, err := decodeDocuments(src[:end])
		if err == nil {
			continue
		}
		if _, m := splitYAMLError(err); m == msg {
			return n
		}
	}
	return 0
}

// deref follows an alias to the node it names. The parser rejects unknown
// anchors, and an anchor cannot be put on an alias, so one step suffices;
// the loop is only a guard.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node's kind for "must be X, got Y" messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("%q", v)
	}
	return "an unexpected YAML node"
}
