package flowlet

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flowrun/internal/suggest"
)

// Config is a flowlet's `config:` mapping from the app YAML, with typed
// getters. Values arrive as YAML typed them (string, int, float64, bool, nil,
// []any, map[string]any). Every getter takes a default for a field that is
// absent or null, and returns a *ConfigError naming the flowlet and the field
// when the value has the wrong type. Like the planner's own fields, Int,
// Float and Bool also take a string holding their value: inside a flow
// mapping a variable must be quoted, so `{count: "${N:100}"}` is the
// string "100". String takes only strings (007 would have become 7).
//
//	path, err := ic.Config.String("path", "")
//	every, err := ic.Config.Duration("flush_every", 10*time.Second)
type Config struct {
	flowlet string
	m       map[string]any
}

// NewConfig wraps the config of the named flowlet. A nil map is an empty config.
func NewConfig(flowlet string, m map[string]any) Config {
	return Config{flowlet: flowlet, m: m}
}

// ConfigError is a problem with one config field.
type ConfigError struct {
	Flowlet, Field, Msg string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("flowlet %q: config: %s", e.Flowlet, e.Msg)
	}
	return fmt.Sprintf("flowlet %q: config field %q: %s", e.Flowlet, e.Field, e.Msg)
}

// ConfigField names the field (empty for the config as a whole), so that
// the planner can point at it in the app file.
func (e *ConfigError) ConfigField() string { return e.Field }

func (c Config) errorf(field, format string, args ...any) error {
	return &ConfigError{Flowlet: c.flowlet, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Map returns the raw mapping (not a copy).
func (c Config) Map() map[string]any { return c.m }

// Has reports whether field is set to a non-null value.
func (c Config) Has(field string) bool { return c.m[field] != nil }

func (c Config) get(field string) (any, bool) {
	v := c.m[field]
	return v, v != nil
}

var decimalRE = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

func describe(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 80 {
			return fmt.Sprintf("the string %q… (%d bytes)", v[:64], len(v))
		}
		return fmt.Sprintf("the string %q", v)
	case int, int64, uint64:
		return fmt.Sprintf("the number %v", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// String returns a string field.
func (c Config) String(field, def string) (string, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return def, c.errorf(field, "want a string, got %s (quote it in the YAML)", describe(v))
	}
	return s, nil
}

// Int returns an integer field. Whole floats (3.0) are accepted.
func (c Config) Int(field string, def int) (int, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	switch n := v.(type) {
	case int:
		return n, nil
	case int64:
		if n >= math.MinInt && n <= math.MaxInt {
			return int(n), nil
		}
	case uint64:
		if n <= math.MaxInt {
			return int(n), nil
		}
	case float64:
		if n != math.Trunc(n) {
			return def, c.errorf(field, "want an integer, got %s", describe(v))
		}
		// float64(math.MaxInt) rounds up to 2^63, which int cannot hold: the
		// upper bound must be exclusive.
		if n >= math.MinInt && n < -float64(math.MinInt) {
			return int(n), nil
		}
	case string:
		i, err := strconv.Atoi(strings.TrimSpace(n))
		if err == nil {
			return i, nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return def, c.errorf(field, "integer out of range: %s", describe(v))
		}
		return def, c.errorf(field, "want an integer, got %s", describe(v))
	default:
		return def, c.errorf(field, "want an integer, got %s", describe(v))
	}
	return def, c.errorf(field, "integer %v out of range", v)
}

// Float returns a number field.
func (c Config) Float(field string, def float64) (float64, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	switch n := v.(type) {
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return def, c.errorf(field, "want a finite number, got %v", n)
		}
		return n, nil
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case string:
		// Decimal only: ParseFloat would also take hex floats, "1_000",
		// "inf" and "nan".
		if t := strings.TrimSpace(n); decimalRE.MatchString(t) {
			if f, err := strconv.ParseFloat(t, 64); err == nil && !math.IsInf(f, 0) {
				return f, nil
			}
		}
	}
	return def, c.errorf(field, "want a number, got %s", describe(v))
}

// Bool returns a boolean field (YAML true/false).
func (c Config) Bool(field string, def bool) (bool, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(b)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return def, c.errorf(field, "want true or false, got %s", describe(v))
}

// Duration returns a duration field written as Go durations are ("250ms",
// "1m30s"). A bare 0 means zero; any other bare number is an error, because
// its unit would be a guess.
func (c Config) Duration(field string, def time.Duration) (time.Duration, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	switch s := v.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return def, c.errorf(field, "want a duration like \"500ms\" or \"1m\", got %q", s)
		}
		return d, nil
	case int:
		if s == 0 {
			return 0, nil
		}
		return def, c.errorf(field, "want a duration like \"500ms\" or \"1m\", got the number %d: add a unit, e.g. \"%ds\"", s, s)
	}
	return def, c.errorf(field, "want a duration like \"500ms\" or \"1m\", got %s", describe(v))
}

// Strings returns a list of strings; a single string is a list of one.
func (c Config) Strings(field string, def []string) ([]string, error) {
	v, ok := c.get(field)
	if !ok {
		return def, nil
	}
	switch l := v.(type) {
	case string:
		return []string{l}, nil
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return def, c.errorf(field, "item %d: want a string, got %s", i, describe(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return def, c.errorf(field, "want a list of strings, got %s", describe(v))
}

// Require returns an error naming the first of fields that is absent or null.
func (c Config) Require(fields ...string) error {
	for _, f := range fields {
		if !c.Has(f) {
			return c.errorf(f, "required but not set")
		}
	}
	return nil
}

// Known returns an error listing the fields that are not among known, so
// that a typo in the YAML does not silently fall back to a default.
func (c Config) Known(known ...string) error {
	var unknown []string
	for k := range c.m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	k := slices.Clone(known)
	sort.Strings(k)
	if len(k) == 0 {
		if len(unknown) == 1 {
			return c.errorf(unknown[0], "unknown field (this flowlet takes no config)")
		}
		return c.errorf("", "unknown fields %s (this flowlet takes no config)", strings.Join(unknown, ", "))
	}
	if len(unknown) == 1 {
		if best := suggest.Closest(unknown[0], k); best != "" {
			return c.errorf(unknown[0], "unknown field; did you mean %q? (known: %s)", best, strings.Join(k, ", "))
		}
		return c.errorf(unknown[0], "unknown field (known: %s)", strings.Join(k, ", "))
	}
	return c.errorf("", "unknown fields %s (known: %s)", strings.Join(unknown, ", "), strings.Join(k, ", "))
}
