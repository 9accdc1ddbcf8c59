package planner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseFile reads the app file at path and plans it. Errors in the file are
// reported as an ErrorList whose positions name path; failing to read the
// file is reported as the os error.
func ParseFile(path string, opts Options) (*Plan, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, src, opts)
}

// Parse plans the app described by src. name is used as the file name in
// error positions. On failure the error is an ErrorList holding every
// problem found, and the Plan is nil: a Plan exists only if it is valid.
func Parse(name string, src []byte, opts Options) (*Plan, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	errs := &errorSink{}
	d := &decoder{file: name, errs: errs, aliasBudget: maxAliasExpansion, broken: map[*yaml.Node]bool{}}
	root := d.readYAML(src)
	if root == nil {
		return nil, errs.err()
	}
	interpolateTree(root, lookup, name, errs, d.broken)
	spec := d.decodeApp(root)
	g := validate(spec, opts.Types, errs)
	if !errs.empty() {
		return nil, errs.err()
	}
	return buildPlan(spec, g), nil
}

// maxAliasExpansion caps how many config values YAML aliases may expand to,
// so that a "billion laughs" file fails fast instead of exhausting memory.
const maxAliasExpansion = 100_000

// appSpec is an app file after structural decoding: fields are typed and keep
// their positions, but nothing is cross-checked and no defaults are applied.
type appSpec struct {
	pos         Position // of the top-level mapping
	bad         bool     // not a mapping (reported)
	app         field[string]
	flowlets    []*flowletSpec // in file order
	flowletsBad bool           // flowlets is not a mapping (reported)
	connections []*connectionSpec
}

type flowletSpec struct {
	name       string
	pos        Position // of the name
	bad        bool     // not a mapping (reported)
	typ        field[string]
	plugin     field[string]
	instances  field[int]
	batchSize  field[int]
	retryMax   field[int]
	backoff    field[time.Duration]
	maxBackoff field[time.Duration]
	tick       field[time.Duration]
	config     map[string]any
}

type connectionSpec struct {
	pos      Position // of the list item
	from     field[string]
	to       field[string]
	strategy field[string]
	key      field[string]
}

// field is a decoded scalar. set is true only for a well-formed value, so
// validation checks only real values; bad marks a value that was present
// but malformed and already reported, so that validation does not also
// call it missing. Absent and null fields have neither.
type field[T any] struct {
	val T
	set bool
	bad bool
	pos Position
}

// The known fields, in the order the spec documents them. Unknown fields are
// errors rather than ignored, so a typo never silently becomes a default.
var (
	appFields        = []string{"app", "flowlets", "connections"}
	flowletFields    = []string{"type", "plugin", "instances", "batch_size", "retries", "tick", "config"}
	connectionFields = []string{"from", "to", "strategy", "key"}
	retryFields      = []string{"max", "backoff", "max_backoff"}
)

// decoder turns the YAML node tree into an appSpec, reporting structural
// problems (wrong kinds, unknown or duplicate keys, malformed scalars).
type decoder struct {
	file        string
	errs        *errorSink
	aliasBudget int
	// broken holds the scalars whose interpolation failed; they are
	// treated as malformed so their raw "${X}" text causes no more errors.
	broken map[*yaml.Node]bool
}

func nodePos(file string, n *yaml.Node) Position {
	return Position{File: file, Line: n.Line, Col: n.Column}
}

func (d *decoder) pos(n *yaml.Node) Position { return nodePos(d.file, n) }

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
	d.errs.add(Position{File: d.file, Line: line}, "invalid YAML: %s", msg)
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

// mapping reports whether n is a mapping (null counts as an empty one),
// reporting an error naming what otherwise.
func (d *decoder) mapping(n *yaml.Node, what string) bool {
	n = deref(n)
	if n.Kind == yaml.MappingNode || isNull(n) {
		return true
	}
	d.errs.add(d.pos(n), "%s must be a mapping, got %s", what, describe(n))
	return false
}

// eachPair calls fn for each key/value pair of the mapping n (null is an
// empty mapping). Keys are dereferenced, values are passed as written so
// that config conversion can see aliases. It reports and skips keys that are
// not scalars, merge keys and duplicate keys; when known is non-nil it also
// reports and skips keys not in known, naming where in the message.
func (d *decoder) eachPair(n *yaml.Node, where string, known []string, fn func(key string, k, v *yaml.Node)) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return
	}
	first := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			d.errs.add(d.pos(k), "keys %s must be plain scalars, got %s", where, describe(k))
			continue
		case k.ShortTag() == "!!merge":
			// Merging would make "which fields does this flowlet set" depend
			// on another node; aliases of whole values are supported instead.
			d.errs.add(d.pos(k), "merge keys (<<) are not supported; use an alias (*name) for the whole value instead")
			continue
		}
		if prev, dup := first[k.Value]; dup {
			d.errs.add(d.pos(k), "duplicate key %q %s (first at %d:%d)", k.Value, where, prev.Line, prev.Column)
			continue
		}
		first[k.Value] = k
		if known != nil && !contains(known, k.Value) {
			hint := didYouMean(k.Value, known)
			if hint == "" {
				hint = " (known fields: " + strings.Join(known, ", ") + ")"
			}
			d.errs.add(d.pos(k), "unknown field %q %s%s", k.Value, where, hint)
			continue
		}
		fn(k.Value, k, v)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (d *decoder) decodeApp(root *yaml.Node) *appSpec {
	spec := &appSpec{pos: d.pos(root)}
	if !d.mapping(root, "the app file") {
		spec.bad = true
		return spec
	}
	d.eachPair(root, "at the top level", appFields, func(key string, _, v *yaml.Node) {
		switch key {
		case "app":
			spec.app = d.str(v, "app")
		case "flowlets":
			if !d.mapping(v, "flowlets (flowlet name: definition)") {
				spec.flowletsBad = true
				return
			}
			d.eachPair(v, "in flowlets", nil, func(name string, k, v *yaml.Node) {
				spec.flowlets = append(spec.flowlets, d.decodeFlowlet(name, k, v))
			})
		case "connections":
			d.decodeConnections(v, spec)
		}
	})
	return spec
}

func (d *decoder) decodeFlowlet(name string, k, v *yaml.Node) *flowletSpec {
	f := &flowletSpec{name: name, pos: d.pos(k), config: map[string]any{}}
	where := fmt.Sprintf("in flowlet %q", name)
	if !d.mapping(v, fmt.Sprintf("flowlet %q", name)) {
		f.bad = true
		return f
	}
	d.eachPair(v, where, flowletFields, func(key string, _, v *yaml.Node) {
		switch key {
		case "type":
			f.typ = d.str(v, "type")
		case "plugin":
			f.plugin = d.str(v, "plugin")
		case "instances":
			f.instances = d.integer(v, "instances")
		case "batch_size":
			f.batchSize = d.integer(v, "batch_size")
		case "tick":
			f.tick = d.duration(v, "tick")
		case "retries":
			if d.mapping(v, "retries") {
				d.eachPair(v, "in retries of flowlet "+strconv.Quote(name), retryFields, func(key string, _, v *yaml.Node) {
					switch key {
					case "max":
						f.retryMax = d.integer(v, "retries.max")
					case "backoff":
						f.backoff = d.duration(v, "retries.backoff")
					case "max_backoff":
						f.maxBackoff = d.duration(v, "retries.max_backoff")
					}
				})
			}
		case "config":
			if d.mapping(v, "config") {
				f.config = d.configMap(v, map[*yaml.Node]bool{}, deref(v) != v)
			}
		}
	})
	return f
}

func (d *decoder) decodeConnections(n *yaml.Node, spec *appSpec) {
	n = deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.add(d.pos(n), "connections must be a list, got %s", describe(n))
		return
	}
	for i, item := range n.Content {
		item = deref(item)
		c := &connectionSpec{pos: d.pos(item)}
		if !d.mapping(item, fmt.Sprintf("connection #%d", i+1)) {
			continue
		}
		d.eachPair(item, fmt.Sprintf("in connection #%d", i+1), connectionFields, func(key string, _, v *yaml.Node) {
			switch key {
			case "from":
				c.from = d.str(v, "from")
			case "to":
				c.to = d.str(v, "to")
			case "strategy":
				c.strategy = d.str(v, "strategy")
			case "key":
				c.key = d.str(v, "key")
			}
		})
		spec.connections = append(spec.connections, c)
	}
}

// str reads a scalar field as text. Typed fields are parsed from this text
// whatever the YAML tag, so "2" and 2 are the same integer; null is the
// same as an absent field.
func (d *decoder) str(n *yaml.Node, what string) field[string] {
	n = deref(n)
	f := field[string]{pos: d.pos(n)}
	switch {
	case d.broken[n]:
		f.bad = true
	case isNull(n):
	case n.Kind != yaml.ScalarNode:
		d.errs.add(f.pos, "%s must be a single value, got %s", what, describe(n))
		f.bad = true
	default:
		f.val, f.set = n.Value, true
	}
	return f
}

func (d *decoder) integer(n *yaml.Node, what string) field[int] {
	return parseField(d, n, what, func(text string) (int, error) {
		return strconv.Atoi(strings.TrimSpace(text))
	}, "an integer")
}

func (d *decoder) duration(n *yaml.Node, what string) field[time.Duration] {
	return parseField(d, n, what, func(text string) (time.Duration, error) {
		return time.ParseDuration(strings.TrimSpace(text))
	}, "a duration such as 10ms, 1s or 1m30s")
}

func parseField[T any](d *decoder, n *yaml.Node, what string, parse func(string) (T, error), want string) field[T] {
	text := d.str(n, what)
	f := field[T]{bad: text.bad, pos: text.pos}
	if !text.set {
		return f
	}
	v, err := parse(text.val)
	if err != nil {
		d.errs.add(f.pos, "%s must be %s, got %q", what, want, text.val)
		f.bad = true
		return f
	}
	f.val, f.set = v, true
	return f
}

// configMap converts a config mapping to Go values for the flowlet's Init:
// mappings become map[string]any, lists []any, scalars their YAML type
// (int, float64, bool, string, nil). Every flowlet gets its own copy, even
// when configs share a node through an alias. active holds the collections
// being converted, to stop an alias that refers to its own ancestor;
// inAlias says whether n is (part of) an alias expansion.
func (d *decoder) configMap(n *yaml.Node, active map[*yaml.Node]bool, inAlias bool) map[string]any {
	n = deref(n)
	m := map[string]any{}
	active[n] = true
	d.eachPair(n, "in config", nil, func(key string, _, v *yaml.Node) {
		m[key] = d.configValue(v, active, inAlias)
	})
	delete(active, n)
	return m
}

func (d *decoder) configValue(orig *yaml.Node, active map[*yaml.Node]bool, inAlias bool) any {
	n := deref(orig)
	if n != orig {
		if active[n] {
			d.errs.add(d.pos(orig), "alias *%s refers to a value that contains it", orig.Value)
			return nil
		}
		inAlias = true
	}
	if inAlias {
		// Only alias expansions count against the budget: everything else
		// is bounded by the file's size.
		d.aliasBudget--
		if d.aliasBudget < 0 {
			if d.aliasBudget == -1 {
				d.errs.add(d.pos(orig), "config aliases expand to more than %d values", maxAliasExpansion)
			}
			return nil
		}
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.configMap(n, active, inAlias)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		active[n] = true
		for _, c := range n.Content {
			list = append(list, d.configValue(c, active, inAlias))
		}
		delete(active, n)
		return list
	case yaml.ScalarNode:
		if isNull(n) {
			return nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			d.errs.add(d.pos(n), "invalid config value %q: %s", n.Value, strings.TrimPrefix(err.Error(), "yaml: "))
			return nil
		}
		return v
	}
	d.errs.add(d.pos(n), "unexpected YAML node in config")
	return nil
}
