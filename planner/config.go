package planner

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// configMap converts a config mapping to Go values for the flowlet's Init:
// mappings become map[string]any, lists []any, scalars their YAML type
// (int, float64, bool, string, nil). Every flowlet gets its own copy, even
// when configs share a node through an alias. active holds the collections
// being converted, to stop an alias that refers to its own ancestor;
// inAlias says whether n is (part of) an alias expansion.
func (d *decoder) configMap(n *yaml.Node, active map[*yaml.Node]bool, inAlias bool) map[string]any {
	n = deref(n)
	m := map[string]any{}
	if inAlias && d.aliasBudget < 0 {
		return m // past the budget (reported): a shared mapping is not walked again
	}
	active[n] = true
	d.eachPair(n, "in config", nil, func(key string, _, v *yaml.Node) {
		m[key] = d.configValue(v, active, inAlias)
	})
	delete(active, n)
	return m
}

// hasBroken reports whether a scalar under n failed interpolation (it was
// reported; its raw text must not reach a type's CheckConfig).
func (d *decoder) hasBroken(n *yaml.Node, seen map[*yaml.Node]bool) bool {
	n = deref(n)
	if seen[n] {
		return false
	}
	seen[n] = true
	if d.broken[n] {
		return true
	}
	for _, c := range n.Content {
		if d.hasBroken(c, seen) {
			return true
		}
	}
	return false
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
		switch x := v.(type) {
		case string:
			// Text that is not UTF-8 (a !!binary of other bytes, a
			// variable's value) would reach a plugin as U+FFFD in JSON
			// while an in-process flowlet saw the bytes.
			if !utf8.ValidString(x) {
				d.errs.add(d.pos(n), "config value %q is not UTF-8 text, which JSON (the form plugins get a config in) cannot carry; keep binary data as base64 text (without !!binary) and decode it in the flowlet", x)
				return nil
			}
		case time.Time:
			// A config has no timestamps (it travels to plugins as JSON);
			// a date is the text written, as a flowlet reading a string
			// expects.
			return n.Value
		case uint64:
			// An integer beyond int64 (and within uint64): a float64, as
			// beyond uint64 and as a plugin decodes it from JSON.
			f := float64(x)
			if f == 0x1p64 || uint64(f) != x {
				d.inexactInteger(n, f)
				return nil
			}
			return f
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				d.errs.add(d.pos(n), "config value %q is not a finite number, which JSON (the form plugins get a config in) cannot carry", n.Value)
				return nil
			}
			if i, ok := new(big.Int).SetString(strings.ReplaceAll(n.Value, "_", ""), 10); ok && n.Style&yaml.TaggedStyle == 0 {
				// An integer written beyond uint64 (one tagged !!float is
				// a float, as asked).
				if new(big.Float).SetInt(i).Cmp(big.NewFloat(x)) != 0 {
					d.inexactInteger(n, x)
					return nil
				}
			}
		}
		return v
	}
	d.errs.add(d.pos(n), "unexpected YAML node in config")
	return nil
}

// inexactInteger reports a config integer beyond int64 that a float64 (its
// type then, and a JSON number's in a plugin) would round to f.
func (d *decoder) inexactInteger(n *yaml.Node, f float64) {
	d.errs.add(d.pos(n), "config integer %s is beyond int64 and a float64 cannot hold it exactly (it would be %s); quote it to keep the text",
		n.Value, strconv.FormatFloat(f, 'f', -1, 64))
}
