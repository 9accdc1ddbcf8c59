package planner

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Text renders the plan for humans: flowlets in the order
// they are started, with every default filled in, then the queues and their
// consumer groups. The output is deterministic, which the golden tests use.
func (p *Plan) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "app %s\n", p.App)
	if r := p.Runtime; !r.IsZero() {
		b.WriteString("\nruntime\n")
		line := func(label, value string) { fmt.Fprintf(&b, "  %-13s %s\n", label, value) }
		if r.HTTP != nil {
			line("http", r.HTTP.Value)
		}
		if r.MemoryLimit != nil {
			line("memory_limit", r.MemoryLimit.Value)
		}
		if r.MaxBacklog != nil {
			line("max_backlog", strconv.Itoa(r.MaxBacklog.Value))
		}
		if r.NoSync != nil {
			line("no_sync", strconv.FormatBool(r.NoSync.Value))
		}
		if r.DeferCommits != nil {
			line("defer_commits", strconv.FormatBool(r.DeferCommits.Value))
		}
		if r.StepTimeout != nil {
			line("step_timeout", r.StepTimeout.Value)
		}
		if r.PluginStartTimeout != nil {
			line("plugin_start_timeout", r.PluginStartTimeout.Value)
		}
	}
	for _, f := range p.Flowlets {
		fmt.Fprintf(&b, "\nflowlet %s\n", f.Name)
		line := func(label, value string) { fmt.Fprintf(&b, "  %-11s %s\n", label, value) }
		if f.Plugin != "" {
			line("plugin", f.Plugin)
		} else {
			line("type", f.Type)
		}
		line("instances", strconv.Itoa(f.Instances))
		line("batch_size", strconv.Itoa(f.BatchSize))
		line("retries", fmt.Sprintf("max %d, backoff %s, max_backoff %s", f.Retry.Max, f.Retry.Backoff, f.Retry.MaxBackoff))
		if f.Tick > 0 {
			line("tick", f.Tick.String())
		}
		if len(f.Config) > 0 {
			line("config", formatValue(f.Config))
		}
		if len(f.Inputs) > 0 {
			line("inputs", strings.Join(f.Inputs, ", "))
		}
		if len(f.Outputs) > 0 {
			line("outputs", strings.Join(f.Outputs, ", "))
		}
	}
	for i, q := range p.Queues {
		if i == 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "queue %s", q.Name)
		if q.Key != "" {
			fmt.Fprintf(&b, " (key %s)", q.Key)
		}
		b.WriteString("\n")
		for _, g := range q.Groups {
			fmt.Fprintf(&b, "  group %s: %s, %s\n", g.Name, g.describe(), plural(g.Instances, "instance"))
		}
	}
	return b.String()
}

// describe is the group's strategy, with the key for hash: "hash(user)".
func (g *Group) describe() string {
	if g.Strategy == Hash {
		return fmt.Sprintf("hash(%s)", g.Key)
	}
	return string(g.Strategy)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// formatValue writes a config value in a JSON-like notation with sorted
// keys, so that strings and numbers stay distinguishable ("8080" vs 8080).
func formatValue(v any) string {
	var b strings.Builder
	writeValue(&b, v)
	return b.String()
}

func writeValue(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		b.WriteString(strconv.Quote(v))
	case float64:
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(k))
			b.WriteString(": ")
			writeValue(b, v[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeValue(b, x)
		}
		b.WriteByte(']')
	default:
		fmt.Fprintf(b, "%v", v)
	}
}
