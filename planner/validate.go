package planner

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Names of apps, flowlets and outputs end up in queue names, directories
// and metric labels, so they are restricted to a portable alphabet. Dots are
// excluded because "flowlet.output" uses one as the separator.
var (
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// Partition keys are looked up by name in emitted events, so they are
	// identifiers.
	keyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

const (
	nameRule = "[a-z0-9][a-z0-9_-]{0,62}"
	keyRule  = "[A-Za-z_][A-Za-z0-9_]{0,62}"
)

// graph is the validated wiring: the connections whose endpoints exist, with
// defaults applied. Without errors it is exactly the app's connections.
type graph struct {
	edges []*edge
}

type edge struct {
	from, output, to string
	strategy         Strategy
	key              string
	partitions       int      // 0: not set
	partitionsPos    Position // of the partitions field, when set
	pos              Position
}

// validator checks what structural decoding cannot: values in range, names
// well-formed, references resolvable and the graph acyclic. It reports every
// problem and keeps going, skipping only checks that depend on a value
// already found wrong.
type validator struct {
	types    map[string]TypeInfo
	errs     *errorSink
	flowlets map[string]*flowletSpec
	names    []string // flowlet names in file order, for suggestions
	// suggestWork is what is left of maxSuggestWork.
	suggestWork int
}

// maxSuggestWork bounds the names compared for "did you mean" hints on
// unknown flowlets: each compares with every flowlet's name, so a file of
// thousands of flowlets and misspelt references would take quadratic time.
// Later references are still reported, without a hint.
const maxSuggestWork = 100_000

func validate(spec *appSpec, types map[string]TypeInfo, errs *errorSink) *graph {
	v := &validator{types: types, errs: errs, flowlets: map[string]*flowletSpec{}, suggestWork: maxSuggestWork}
	v.checkApp(spec)
	v.checkRuntime(spec.runtime)
	for _, f := range spec.flowlets {
		v.flowlets[f.name] = f
		v.names = append(v.names, f.name)
		v.checkFlowlet(f)
	}
	g := &graph{}
	seen := map[[3]string]*connectionSpec{}
	for _, c := range spec.connections {
		e := v.checkConnection(c)
		if e == nil {
			continue
		}
		id := [3]string{e.from, e.output, e.to}
		if first, dup := seen[id]; dup {
			errs.add(c.pos, "duplicate connection %s -> %s (first at %d:%d)", QueueName(e.from, e.output), e.to, first.pos.Line, first.pos.Col)
			continue
		}
		seen[id] = c
		g.edges = append(g.edges, e)
	}
	v.checkQueueKeys(g.edges)
	v.checkQueuePartitions(g.edges)
	v.checkAcyclic(spec.flowlets, g.edges)
	return g
}

// checkQueueKeys reports hash groups that disagree on the key of a queue.
// A queue is partitioned once, when an event is enqueued, by the one key the
// producer sets on it (see package queue); every hash group then maps
// partitions to its instances. Two hash groups with different keys would
// need two partitionings of the same events, so they must read different
// queues: the producer emits on two outputs instead.
func (v *validator) checkQueueKeys(edges []*edge) {
	first := map[string]*edge{}
	for _, e := range edges {
		if e.strategy != Hash || e.key == "" {
			continue
		}
		q := QueueName(e.from, e.output)
		f, ok := first[q]
		if !ok {
			first[q] = e
			continue
		}
		if f.key != e.key {
			v.errs.add(e.pos, "queue %s is partitioned by key %q (connection at %d:%d), so this connection cannot hash by %q: a queue has one partition key; emit on a separate output instead",
				q, f.key, f.pos.Line, f.pos.Col, e.key)
		}
	}
}

// checkQueuePartitions reports connections of one queue that disagree on
// its partition count, and consumers with more instances than partitions
// (an instance reads whole partitions: the extra ones would idle).
func (v *validator) checkQueuePartitions(edges []*edge) {
	first := map[string]*edge{}
	for _, e := range edges {
		if e.partitions == 0 {
			continue
		}
		q := QueueName(e.from, e.output)
		if f, ok := first[q]; !ok {
			first[q] = e
		} else if f.partitions != e.partitions {
			v.errs.add(e.partitionsPos, "queue %s has %d partitions (connection at %d:%d), so this connection cannot ask for %d: a queue has one partition count",
				q, f.partitions, f.pos.Line, f.pos.Col, e.partitions)
		}
	}
	for _, e := range edges {
		parts, pos := DefaultPartitions, e.pos
		if f := first[QueueName(e.from, e.output)]; f != nil {
			parts = f.partitions
		}
		if e.partitions != 0 {
			pos = e.partitionsPos
		}
		to := v.flowlets[e.to]
		if to == nil || !to.instances.set || to.instances.val <= parts || to.instances.val > MaxInstances {
			continue
		}
		v.errs.add(pos, "flowlet %q has %d instances, more than the %d partition(s) of queue %s: an instance reads whole partitions, so %d would idle",
			e.to, to.instances.val, parts, QueueName(e.from, e.output), to.instances.val-parts)
	}
}

func (v *validator) checkApp(spec *appSpec) {
	if spec.bad {
		return
	}
	switch {
	case spec.app.bad:
	case !spec.app.set:
		v.errs.add(spec.pos, "missing required field \"app\" (the app's name)")
	case !nameRE.MatchString(spec.app.val):
		v.errs.add(spec.app.pos, "invalid app name %q: must match %s", spec.app.val, nameRule)
	}
	if len(spec.flowlets) == 0 && !spec.flowletsBad {
		v.errs.add(spec.pos, "the app has no flowlets: add a \"flowlets\" mapping of name to flowlet")
	}
}

func (v *validator) checkFlowlet(f *flowletSpec) {
	if !nameRE.MatchString(f.name) {
		v.errs.add(f.pos, "invalid flowlet name %q: must match %s", f.name, nameRule)
	}
	switch {
	case f.bad || f.typ.bad || f.plugin.bad:
	case f.typ.set && f.plugin.set:
		v.errs.add(f.pos, "flowlet %q sets both type and plugin; set exactly one", f.name)
	case !f.typ.set && !f.plugin.set:
		v.errs.add(f.pos, "flowlet %q needs a type (a built-in flowlet) or a plugin (a Go package directory or binary)", f.name)
	case f.typ.set && f.typ.val == "":
		v.errs.add(f.typ.pos, "type must not be empty")
	case f.typ.set && v.types != nil:
		if _, ok := v.types[f.typ.val]; !ok {
			known := sortedKeys(v.types)
			hint := didYouMean(f.typ.val, known)
			if hint == "" {
				hint = " (known types: " + strings.Join(known, ", ") + "; for a type of your own, build a binary that registers it (runtime/cli.Main) or use plugin:)"
			}
			v.errs.add(f.typ.pos, "unknown flowlet type %q%s", f.typ.val, hint)
		}
	case f.plugin.set && f.plugin.val == "":
		v.errs.add(f.plugin.pos, "plugin must not be empty")
	}
	checkRange(v.errs, f.instances, "instances", 1, MaxInstances)
	if f.typ.set && f.instances.set && f.instances.val > 1 && f.instances.val <= MaxInstances && v.types[f.typ.val].SingleInstance {
		v.errs.add(f.instances.pos, "flowlet %q: type %s runs as a single instance (one reader, writer or listener); instances must be 1, got %d", f.name, f.typ.val, f.instances.val)
	} else {
		v.checkConfig(f)
	}
	checkRange(v.errs, f.batchSize, "batch_size", 1, MaxBatchSize)
	if f.retryMax.set && f.retryMax.val < 0 {
		v.errs.add(f.retryMax.pos, "retries.max must not be negative, got %d (0 disables retries)", f.retryMax.val)
	} else {
		checkRange(v.errs, f.retryMax, "retries.max", 0, MaxRetries)
	}
	if f.tick.set && f.typ.set && v.types[f.typ.val].NoTick {
		v.errs.add(f.tick.pos, "flowlet %q: type %s has no Tick, so tick would do nothing", f.name, f.typ.val)
	}
	for _, d := range []struct {
		f    field[time.Duration]
		name string
	}{{f.backoff, "retries.backoff"}, {f.maxBackoff, "retries.max_backoff"}, {f.tick, "tick"}} {
		if d.f.set && d.f.val <= 0 {
			v.errs.add(d.f.pos, "%s must be positive, got %s", d.name, d.f.val)
		}
	}
	backoff, maxBackoff := orDefault(f.backoff, DefaultRetry.Backoff), orDefault(f.maxBackoff, DefaultRetry.MaxBackoff)
	if backoff > 0 && maxBackoff > 0 && backoff > maxBackoff {
		pos, which := f.maxBackoff.pos, ""
		if !f.maxBackoff.set {
			pos, which = f.backoff.pos, " (the default)"
		}
		v.errs.add(pos, "retries.backoff %s is longer than retries.max_backoff %s%s", backoff, maxBackoff, which)
	}
}

// checkConfig asks a built-in type to check the flowlet's config, and
// reports what it finds at the config field it names.
func (v *validator) checkConfig(f *flowletSpec) {
	if f.bad || f.configBad || !f.typ.set || f.instances.bad || (f.instances.set && (f.instances.val < 1 || f.instances.val > MaxInstances)) {
		return
	}
	check := v.types[f.typ.val].CheckConfig
	if check == nil {
		return
	}
	instances := 1
	if f.instances.set {
		instances = f.instances.val
	}
	err := check(f.name, instances, f.config)
	if err == nil {
		return
	}
	pos := f.configPos
	var fe interface{ ConfigField() string }
	if errors.As(err, &fe) {
		if p, ok := f.configKeys[fe.ConfigField()]; ok {
			pos = p
		}
	}
	if pos == (Position{}) {
		pos = f.typ.pos
	}
	v.errs.add(pos, "%s", err.Error())
}

// checkRange reports a set value outside [lo, hi] and says whether the
// field holds a good value.
func checkRange(errs *errorSink, f field[int], name string, lo, hi int) bool {
	if f.set && (f.val < lo || f.val > hi) {
		errs.add(f.pos, "%s must be between %d and %d, got %d", name, lo, hi, f.val)
		return false
	}
	return f.set
}

// checkConnection reports the connection's problems and returns its edge if
// both endpoints resolve (so the graph checks can still use it), or nil.
func (v *validator) checkConnection(c *connectionSpec) *edge {
	e := &edge{output: DefaultOutput, strategy: DefaultStrategy, pos: c.pos}
	ok := true

	switch {
	case c.from.bad:
		ok = false
	case !c.from.set:
		v.errs.add(c.pos, "connection needs \"from\" (the producing flowlet, optionally .output)")
		ok = false
	default:
		name, output, hasOutput := strings.Cut(c.from.val, ".")
		e.from = name
		if hasOutput {
			e.output = output
			if !nameRE.MatchString(output) {
				v.errs.add(c.from.pos, "invalid output name %q in from %q: must match %s", output, c.from.val, nameRule)
				ok = false
			} else if slices.Contains(ReservedOutputs, output) {
				v.errs.add(c.from.pos, "output name %q in from %q is reserved for the runtime's dead-letter queues (<flowlet>.dlq, <flowlet>.dlq-replay)", output, c.from.val)
				ok = false
			}
		}
		if !v.resolve(name, "from", c.from.pos) {
			ok = false
		}
	}

	switch {
	case c.to.bad:
		ok = false
	case !c.to.set:
		v.errs.add(c.pos, "connection needs \"to\" (the consuming flowlet)")
		ok = false
	default:
		e.to = c.to.val
		if name, _, hasOutput := strings.Cut(c.to.val, "."); hasOutput {
			v.errs.add(c.to.pos, "to must name a flowlet, got %q: a flowlet has a single input, outputs are named only in from", c.to.val)
			ok = false
			if _, exists := v.flowlets[name]; !exists {
				v.resolve(name, "to", c.to.pos)
			}
		} else if !v.resolve(c.to.val, "to", c.to.pos) {
			ok = false
		}
	}

	strategyOK := !c.strategy.bad
	if c.strategy.set {
		e.strategy = Strategy(c.strategy.val)
		if !contains(strategyNames, c.strategy.val) {
			hint := didYouMean(c.strategy.val, strategyNames)
			if hint == "" {
				hint = " (want fifo, round_robin or hash)"
			}
			v.errs.add(c.strategy.pos, "unknown strategy %q%s", c.strategy.val, hint)
			strategyOK = false
		}
	}
	switch {
	case c.key.bad:
	case c.key.set && !keyRE.MatchString(c.key.val):
		v.errs.add(c.key.pos, "invalid key %q: must match %s", c.key.val, keyRule)
	}
	switch {
	case !strategyOK:
	case e.strategy == Hash && !c.key.set && !c.key.bad:
		pos := c.pos
		if c.strategy.set {
			pos = c.strategy.pos
		}
		v.errs.add(pos, "strategy hash needs a key: the name of the partition key the producer attaches to each event")
	case c.key.set && e.strategy != Hash:
		v.errs.add(c.key.pos, "key is only allowed with strategy hash (this connection uses %s)", e.strategy)
	}
	e.key = c.key.val
	if checkRange(v.errs, c.partitions, "partitions", 1, MaxPartitions) {
		e.partitions, e.partitionsPos = c.partitions.val, c.partitions.pos
	}

	if !ok {
		return nil
	}
	if e.from == e.to {
		v.errs.add(c.pos, "flowlet %q is connected to itself: self-loops are not allowed because the graph must be acyclic", e.from)
		return nil
	}
	v.checkTypes(c, e)
	return e
}

// resolve reports whether the flowlet called name exists, reporting it (as
// the value of field at pos) if not.
func (v *validator) resolve(name, field string, pos Position) bool {
	if _, ok := v.flowlets[name]; ok {
		return true
	}
	hint := ""
	if v.suggestWork >= len(v.names) {
		v.suggestWork -= len(v.names)
		hint = didYouMean(name, v.names)
	}
	v.errs.add(pos, "unknown flowlet %q in %s%s", name, field, hint)
	return false
}

// checkTypes applies what the built-in types declare about their outputs
// and inputs to a connection between existing flowlets.
func (v *validator) checkTypes(c *connectionSpec, e *edge) {
	if v.types == nil {
		return
	}
	from, to := v.flowlets[e.from], v.flowlets[e.to]
	if info, ok := v.types[from.typ.val]; ok && from.typ.set && !from.plugin.set {
		switch {
		case info.Sink:
			v.errs.add(c.from.pos, "flowlet %q (type %s) is a sink and has no outputs", e.from, from.typ.val)
		case len(info.Outputs) > 0 && !contains(info.Outputs, e.output):
			hint := didYouMean(e.output, info.Outputs)
			if hint == "" {
				hint = fmt.Sprintf(" (its outputs: %s; write from: %s.<output>)", strings.Join(info.Outputs, ", "), e.from)
			}
			v.errs.add(c.from.pos, "flowlet %q (type %s) has no output %q%s", e.from, from.typ.val, e.output, hint)
		}
	}
	if info, ok := v.types[to.typ.val]; ok && to.typ.set && !to.plugin.set && info.Source {
		v.errs.add(c.to.pos, "flowlet %q (type %s) is a source and accepts no input", e.to, to.typ.val)
	}
}

// checkAcyclic reports every cycle. flowrun requires an acyclic graph: a
// drain stops the sources and waits for every queue to empty, which a cycle
// could keep feeding forever, and exactly-once accounting attributes each
// output event to the input batch that caused it, which a cycle would make
// recursive. A depth-first search in file order reports each back edge,
// with the cycle it closes; removing all reported connections would make
// the graph acyclic, so no cycle goes unmentioned.
func (v *validator) checkAcyclic(flowlets []*flowletSpec, edges []*edge) {
	next := map[string][]*edge{}
	for _, e := range edges {
		next[e.from] = append(next[e.from], e)
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(name string)
	visit = func(name string) {
		state[name] = onPath
		path = append(path, name)
		for _, e := range next[name] {
			switch state[e.to] {
			case unvisited:
				visit(e.to)
			case onPath:
				start := len(path) - 1
				for path[start] != e.to {
					start--
				}
				v.errs.add(e.pos, "connection %s -> %s closes a cycle: %s; the graph must be acyclic so that drain terminates and exactly-once accounting is well-defined",
					QueueName(e.from, e.output), e.to, cyclePath(path[start:]))
			}
		}
		path = path[:len(path)-1]
		state[name] = done
	}
	for _, f := range flowlets {
		if state[f.name] == unvisited {
			visit(f.name)
		}
	}
}

// cyclePath writes a cycle through the flowlets of path, back to the
// first. A long one is elided in the middle: many connections closing
// cycles through a long chain would otherwise make errors quadratic in the
// file's size.
func cyclePath(path []string) string {
	const head, tail, most = 6, 6, 16
	names := append(slices.Clip(path), path[0])
	if len(names) > most {
		more := fmt.Sprintf("... (%d more flowlets)", len(names)-head-tail)
		names = append(append(slices.Clip(names[:head]), more), names[len(names)-tail:]...)
	}
	return strings.Join(names, " -> ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
