package planner

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// LookupFunc reports the value of an environment variable and whether it is
// set, like os.LookupEnv.
type LookupFunc func(name string) (value string, ok bool)

// interpolateTree expands variables in every scalar value under n, in place,
// so that later errors about the value still point at the scalar's position.
// Mapping keys are left alone: they are names (flowlets, fields, config
// keys), and a name that depends on the environment would make the graph's
// shape depend on it too. Alias nodes are skipped because their anchor is
// expanded where it is defined; expanding through aliases would expand
// shared nodes twice and turn an escaped $${X} into a lookup of X. Scalars
// that fail are added to broken. budget is how many bytes substitutions
// may still write (maxInterpolated for a file): past it the scalar where it
// ran out is an error and later ones are broken without one.
func interpolateTree(n *yaml.Node, lookup LookupFunc, file string, errs *errorSink, broken map[*yaml.Node]bool, budget *int) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			interpolateTree(c, lookup, file, errs, broken, budget)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			interpolateTree(n.Content[i], lookup, file, errs, broken, budget)
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return
		}
		if *budget < 0 {
			broken[n] = true // reported where the budget ran out
			return
		}
		value, problems := interpolate(n.Value, lookup, budget)
		for _, p := range problems {
			errs.add(nodePos(file, n), "%s", p)
		}
		if len(problems) > 0 {
			broken[n] = true
			return
		}
		if value == n.Value {
			return
		}
		n.Value = value
		// A plain scalar is read as if the substituted text had been written
		// in the file: "instances: ${N:2}" is the integer 2, and
		// "x: ${EMPTY:}" is null. Quoting or an explicit tag keeps a string.
		if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			n.Tag = ""
		}
	}
}

// interpolate expands ${VAR}, ${VAR:default} and the escape $${ in s. A
// default applies only when VAR is unset, not when it is set but empty, so
// that an explicitly empty variable is respected. It returns the expanded
// text and one message per problem. The values and defaults it writes
// are taken from *budget; it stops when that goes negative.
func interpolate(s string, lookup LookupFunc, budget *int) (string, []string) {
	var b strings.Builder
	var problems []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				problems = append(problems, fmt.Sprintf("unterminated ${ in %q (write $${ for a literal ${)", s))
				return s, problems
			}
			body := s[i+2 : i+2+end]
			i += 2 + end + 1
			name, def, hasDef := strings.Cut(body, ":")
			switch {
			case !validVarName(name):
				problems = append(problems, fmt.Sprintf("invalid variable name %q in ${%s}: want [A-Za-z_][A-Za-z0-9_]*", name, body))
				continue
			case strings.Contains(def, "${"):
				problems = append(problems, fmt.Sprintf("nested ${ in the default of ${%s} is not supported", name))
				continue
			}
			v, ok := lookup(name)
			if !ok && !hasDef {
				problems = append(problems, fmt.Sprintf("environment variable %s is not set and ${%s} has no default (write ${%s:default})", name, name, name))
				continue
			} else if !ok {
				v = def
			}
			// A large variable referenced many times would take memory
			// without bound, as aliases would (maxAliasExpansion).
			if *budget -= len(v); *budget < 0 {
				problems = append(problems, fmt.Sprintf("${VAR} substitutions expand to more than %d bytes (here ${%s}, %d bytes)", maxInterpolated, name, len(v)))
				return s, problems
			}
			b.WriteString(v)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), problems
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
