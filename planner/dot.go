package planner

import (
	"fmt"
	"strings"
)

// DOT renders the plan as a Graphviz digraph (render with dot -Tsvg):
// flowlets are nodes labelled with their type or plugin and
// instance count; each consumer group is an edge from the queue's producer,
// labelled with the queue and the group's strategy.
func (p *Plan) DOT() string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(p.App))
	b.WriteString("  rankdir=LR;\n")
	b.WriteString("  node [shape=box, style=rounded];\n")
	for _, f := range p.Flowlets {
		impl := f.Type
		if f.Plugin != "" {
			impl = "plugin " + f.Plugin
		}
		label := f.Name + "\n" + impl + "\n" + plural(f.Instances, "instance")
		fmt.Fprintf(&b, "  %s [label=%s];\n", dotQuote(f.Name), dotQuote(label))
	}
	for _, q := range p.Queues {
		for _, g := range q.Groups {
			label := q.Name + "\n" + g.describe()
			fmt.Fprintf(&b, "  %s -> %s [label=%s];\n", dotQuote(q.Producer), dotQuote(g.Name), dotQuote(label))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote makes s a DOT double-quoted string; newlines become the \n label
// escape.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", "")
	return `"` + r.Replace(s) + `"`
}
