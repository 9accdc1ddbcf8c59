package builtin

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
)

func init() {
	flowlet.Register("generator", func() flowlet.Flowlet { return &Generator{} }, flowlet.TypeInfo{
		Source: true, Outputs: []string{"out"},
		Doc: "emits numbered synthetic events (count, rate, payload template, keys)",
	})
}

// Generator emits events numbered 0, 1, 2, ... on "out". Instance i of n
// emits the numbers i, i+n, i+2n, ... below count (0 = no end), so the app
// emits each number exactly once. Templates replace {seq} with the number,
// {instance} with the instance index and {mod:N} with the number modulo N;
// "{{" and "}}" are literal braces.
// keys maps partition key names to templates (a hash connection needs its
// key). rate limits events per second for the whole flowlet (0 = as fast as
// possible). The count emitted so far commits with the events. A step too
// large or too slow is redone with half its events (SplitStep); an event
// too large alone goes to the dead-letter queue, counted, and one too slow
// alone stops the generator (DropStep).
//
// The positions mean something only under the instance count they were
// written with, which the first step records: a later run with another
// count stops the source with an error rather than emit some numbers twice
// and skip others.
type Generator struct {
	count    int64
	rate     float64
	payload  template
	keys     []keyTemplate
	batch    int
	name     string
	instance int
	n        int
	// layoutChecked: a committed step recorded this run's instance count.
	layoutChecked bool
	// After a step too large or too slow (runtime.StepSplitter): limit
	// bounds its events; the last step took lastN from position lastK;
	// drop is the event at position dropK to dead-letter (DropStep).
	limit        stepLimit
	lastK, lastN int64
	drop         *droppedRecord
	dropK        int64

	started   time.Time
	startDone int64                                // emitted (committed) when this run started
	clock     func() time.Time                     // time.Now; tests set it
	after     func(time.Duration) <-chan time.Time // time.After; tests set it
}

type keyTemplate struct {
	name string
	t    template
}

// CheckConfig implements flowlet.ConfigChecker: Init only reads the config.
func (g *Generator) CheckConfig(ic flowlet.InitContext) error { return g.Init(ic) }

// MaxGeneratorRate bounds a generator's rate (events per second): over it
// a second's worth of events no longer fits the schedule's arithmetic, and
// no generator comes near it (use 0 for as fast as it can).
const MaxGeneratorRate = 1e9

func (g *Generator) Init(ic flowlet.InitContext) error {
	c := ic.Config
	if err := c.Known("count", "rate", "payload", "keys", "batch"); err != nil {
		return err
	}
	count, err := c.Int("count", 0)
	if err != nil {
		return err
	}
	if g.rate, err = c.Float("rate", 0); err != nil {
		return err
	}
	p, err := c.String("payload", "event {seq}")
	if err != nil {
		return err
	}
	if g.batch, err = c.Int("batch", 1000); err != nil {
		return err
	}
	if count < 0 || g.rate < 0 { // Float refuses infinities
		return &flowlet.ConfigError{Flowlet: ic.Name, Msg: "count and rate must be >= 0"}
	}
	if g.rate > MaxGeneratorRate {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "rate", Msg: fmt.Sprintf("%g over %g events/s (0: as fast as it can)", g.rate, float64(MaxGeneratorRate))}
	}
	// A step holds its batch in memory: at most as many events as a step
	// may dequeue (a flowlet's batch_size).
	if g.batch < 1 || g.batch > planner.MaxBatchSize {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "batch", Msg: fmt.Sprintf("%d not in [1, %d] (events per step, bounded as batch_size is)", g.batch, planner.MaxBatchSize)}
	}
	g.count = int64(count)
	if g.payload, err = parseTemplate(p); err != nil {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "payload", Msg: err.Error()}
	}
	if km, ok := c.Map()["keys"]; ok && km != nil {
		m, ok := km.(map[string]any)
		if !ok {
			return &flowlet.ConfigError{Flowlet: ic.Name, Field: "keys", Msg: "want a mapping of key name to template"}
		}
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			s, ok := m[k].(string)
			if !ok {
				return &flowlet.ConfigError{Flowlet: ic.Name, Field: "keys", Msg: fmt.Sprintf("key %q: want a string template", k)}
			}
			t, err := parseTemplate(s)
			if err != nil {
				return &flowlet.ConfigError{Flowlet: ic.Name, Field: "keys", Msg: fmt.Sprintf("key %q: %v", k, err)}
			}
			g.keys = append(g.keys, keyTemplate{k, t})
		}
	}
	g.name, g.instance, g.n = ic.Name, ic.Instance, ic.Instances
	return nil
}

// instancesKey holds the instance count the positions were written with.
var instancesKey = []byte("instances")

// checkLayout refuses positions written under another instance count, and
// records the count until a step that did so has committed (the first
// steps of several instances conflict on it once; a retry then sees it).
func (g *Generator) checkLayout(t flowlet.Table) error {
	n, err := getU64(t, instancesKey)
	switch {
	case err != nil:
		return err
	case n == 0: // a new store (or one written before the count was recorded)
		return putU64(t, instancesKey, uint64(g.n))
	case n != uint64(g.n):
		return flowlet.Permanent(fmt.Errorf("generator %q: its positions were written with instances: %d, and this run has %d: instance i of n emits the numbers i, i+n, i+2n, …, so a position cannot carry over to another count (some numbers would be emitted twice, others never); run with instances: %d, or start from a new data directory", g.name, n, g.n, n))
	}
	g.layoutChecked = true
	return nil
}

func (g *Generator) Generate(ctx flowlet.Context) error {
	t := ctx.State(posTable)
	if !g.layoutChecked {
		if err := g.checkLayout(t); err != nil {
			return err
		}
	}
	key := []byte("pos/" + strconv.Itoa(g.instance))
	done, err := getU64(t, key)
	if err != nil {
		return err
	}
	k := int64(done)
	if g.lastN > 0 && k == g.lastK+g.lastN {
		g.limit.committed(g.batch) // the last step committed
	}
	g.lastK, g.lastN = k, 0
	n := int64(g.limit.of(g.batch))
	if g.count > 0 {
		// numbers i + k*n below count
		total := (g.count - int64(g.instance) + int64(g.n) - 1) / int64(g.n)
		if k >= total {
			return flowlet.ErrEndOfInput
		}
		n = min(n, total-k)
	}
	if d := g.drop; d != nil && k == g.dropK {
		if d.stop != nil {
			return d.stop
		}
		// The event's dead-letter record alone, in place of the event.
		d.inStep, g.lastN = true, 1
		seq := int64(g.instance) + k*int64(g.n)
		if err := deadLetterDropped(ctx, g.name, g.eventName(seq), g.payload.expand(nil, seq, g.instance), d.cause); err != nil {
			return err
		}
		return putU64(t, key, uint64(k+1))
	}
	g.drop = nil // dead-lettered, if there was one
	if g.rate > 0 {
		now := time.Now()
		if g.clock != nil {
			now = g.clock()
		}
		if g.started.IsZero() {
			g.started, g.startDone = now, k
		}
		perInst := g.rate / float64(g.n)
		allowed := int64(perInst*now.Sub(g.started).Seconds()) - (k - g.startDone) + 1
		// Behind schedule (paused, held back by back-pressure, a slow
		// step): the schedule restarts rather than catch up at once, so
		// at most a second's worth (or a batch) goes out in a burst.
		if burst := max(int64(perInst), int64(g.batch)); allowed > burst {
			g.started = now.Add(-secondsDuration(float64(burst-1) / perInst))
			g.startDone, allowed = k, burst
		}
		if allowed <= 0 {
			// At a tiny rate the wait is beyond any Duration (years, or
			// +Inf): it is 100 ms then, as any wait is at most.
			wait := min(secondsDuration(float64(-allowed+1)/perInst), 100*time.Millisecond)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-g.wait(wait):
			}
			return nil
		}
		n = min(n, allowed)
	}
	var buf []byte
	opts := make([]flowlet.EmitOption, len(g.keys))
	for j := int64(0); j < n; j++ {
		seq := int64(g.instance) + (k+j)*int64(g.n)
		buf = g.payload.expand(buf[:0], seq, g.instance)
		for i, kt := range g.keys {
			opts[i] = flowlet.Key(kt.name, string(kt.t.expand(nil, seq, g.instance)))
		}
		if err := ctx.Emit("out", buf, opts...); err != nil {
			return err
		}
	}
	g.lastN = n
	return putU64(t, key, uint64(k+n))
}

func (g *Generator) eventName(seq int64) string { return "event " + strconv.FormatInt(seq, 10) }

// SplitStep implements runtime.StepSplitter: the step just aborted was too
// large or too slow; the next takes half its events, if it had several.
// The count commits with the events of each smaller step, as with any.
func (g *Generator) SplitStep() bool { return g.limit.split(int(g.lastN)) }

// DropStep implements runtime.StepSplitter: the event of the step just
// aborted, too large on its own, goes to the dead-letter queue in the next
// step, counted as emitted. Too slow on its own, or failing again there,
// it stops the source with a RecordFailsAloneError.
func (g *Generator) DropStep(err error) {
	seq := int64(g.instance) + g.lastK*int64(g.n)
	g.drop = g.drop.dropped(g.dropK == g.lastK, g.name, g.eventName(seq), err)
	g.dropK = g.lastK
}

// secondsDuration is s seconds as a Duration, the longest Duration when s
// is beyond it (a conversion out of range gives a negative one).
func secondsDuration(s float64) time.Duration {
	if ns := s * float64(time.Second); ns < float64(math.MaxInt64) {
		return time.Duration(ns)
	}
	return math.MaxInt64
}

func (g *Generator) wait(d time.Duration) <-chan time.Time {
	if g.after != nil {
		return g.after(d)
	}
	return time.After(d)
}

// template is a string with {seq}, {instance} and {mod:N} placeholders;
// "{{" and "}}" are literal braces (for JSON payloads).
type template []tpart

type tpart struct {
	lit  string
	kind byte // 0 literal, 's' seq, 'i' instance, 'm' mod
	mod  int64
}

func parseTemplate(s string) (template, error) {
	var t template
	lit := func(l string) { // "}}" is a literal "}"
		if l != "" {
			t = append(t, tpart{lit: strings.ReplaceAll(l, "}}", "}")})
		}
	}
	for len(s) > 0 {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			lit(s)
			break
		}
		if strings.HasPrefix(s[i:], "{{") { // a literal "{"
			lit(s[:i])
			t = append(t, tpart{lit: "{"})
			s = s[i+2:]
			continue
		}
		lit(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unterminated { in %q", s)
		}
		name := s[i+1 : i+j]
		switch {
		case name == "seq":
			t = append(t, tpart{kind: 's'})
		case name == "instance":
			t = append(t, tpart{kind: 'i'})
		case strings.HasPrefix(name, "mod:"):
			m, err := strconv.ParseInt(name[4:], 10, 64)
			if err != nil || m < 1 {
				return nil, fmt.Errorf("bad {mod:N} in %q", s)
			}
			t = append(t, tpart{kind: 'm', mod: m})
		default:
			return nil, fmt.Errorf("unknown placeholder {%s} (known: {seq}, {instance}, {mod:N})", name)
		}
		s = s[i+j+1:]
	}
	return t, nil
}

func (t template) expand(dst []byte, seq int64, instance int) []byte {
	for _, p := range t {
		switch p.kind {
		case 0:
			dst = append(dst, p.lit...)
		case 's':
			dst = strconv.AppendInt(dst, seq, 10)
		case 'i':
			dst = strconv.AppendInt(dst, int64(instance), 10)
		case 'm':
			dst = strconv.AppendInt(dst, seq%p.mod, 10)
		}
	}
	return dst
}
