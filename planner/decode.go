package planner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
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
		if strings.HasPrefix(k.Value, "x-") && contains(known, extensionFields) {
			continue // declares anchors; nothing else reads it
		}
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
		case "runtime":
			spec.runtime = d.decodeRuntime(v)
		}
	})
	return spec
}

func (d *decoder) decodeFlowlet(name string, k, v *yaml.Node) *flowletSpec {
	f := &flowletSpec{name: name, pos: d.pos(k), config: map[string]any{}}
	where := fmt.Sprintf("in flowlet %q", name)
	// A flowlet that is an alias of a definition (b: *a) copies its
	// config: that counts against the alias budget as config aliases do.
	inAlias := deref(v) != v
	if !d.mapping(v, fmt.Sprintf("flowlet %q", name)) {
		f.bad = true
		return f
	}
	d.eachPair(v, where, flowletFields, func(key string, kn, v *yaml.Node) {
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
			f.configPos = d.pos(kn)
			if d.mapping(v, "config") {
				before := len(d.errs.list)
				f.config = d.configMap(v, map[*yaml.Node]bool{}, inAlias || deref(v) != v)
				// Past the alias budget the config is incomplete, and walking
				// a shared one again for each flowlet would be quadratic.
				f.configBad = len(d.errs.list) > before || d.aliasBudget < 0 || d.hasBroken(v, map[*yaml.Node]bool{})
				if f.configBad {
					return // no CheckConfig, so no key positions
				}
				f.configKeys = map[string]Position{}
				m := deref(v)
				for i := 0; i+1 < len(m.Content); i += 2 {
					if _, dup := f.configKeys[m.Content[i].Value]; !dup {
						f.configKeys[m.Content[i].Value] = d.pos(m.Content[i])
					}
				}
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
			case "partitions":
				c.partitions = d.integer(v, "partitions")
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
	if errors.Is(err, strconv.ErrRange) {
		d.errs.add(f.pos, "%s %s is out of range", what, strings.TrimSpace(text.val))
		f.bad = true
		return f
	}
	if err != nil {
		d.errs.add(f.pos, "%s must be %s, got %q", what, want, text.val)
		f.bad = true
		return f
	}
	f.val, f.set = v, true
	return f
}
