package planner

import (
	"container/heap"
	"encoding/json"
	"sort"
	"time"
)

// Plan is a validated app: what to run and how it is wired. It is plain data
// (no pointers between flowlets and queues) so it can be logged, compared
// and serialized; use Flowlet and Queue to look things up by name.
type Plan struct {
	App string `json:"app"`
	// Flowlets in topological order: every producer comes before its
	// consumers; ties keep the file's order.
	Flowlets []*Flowlet `json:"flowlets"`
	// Queues in the order of their producers, then by output name.
	Queues []*Queue `json:"queues"`
	// Connections as written, in file order, with defaults applied.
	Connections []*Connection `json:"connections"`
	// Runtime is the file's runtime section (settings of `flowrun run`);
	// zero when the file has none.
	Runtime Runtime `json:"runtime"`
}

// Flowlet is one processing stage and how many copies of it run.
type Flowlet struct {
	Name string `json:"name"`
	// Exactly one of Type (a built-in flowlet type) and Plugin (a Go package
	// directory or a binary path, as written in the file) is set.
	Type      string        `json:"type,omitempty"`
	Plugin    string        `json:"plugin,omitempty"`
	Instances int           `json:"instances"`
	BatchSize int           `json:"batch_size"`
	Retry     RetryPolicy   `json:"retries"`
	Tick      time.Duration `json:"-"` // 0: no tick
	// Config is the flowlet's free-form config after interpolation; never
	// nil. Values are map[string]any, []any, string, int, float64, bool or
	// nil.
	Config map[string]any `json:"config"`
	// Inputs names the queues this flowlet consumes, in Queues order; its
	// consumer group on each is named after the flowlet.
	Inputs []string `json:"inputs,omitempty"`
	// Outputs names the outputs that have a queue ("<flowlet>.<output>"),
	// sorted. Events emitted on any other output have no consumer.
	Outputs []string `json:"outputs,omitempty"`
	Pos     Position `json:"pos"`
}

// RetryPolicy says how often and how patiently a failed batch is retried
// before the flowlet gives up.
type RetryPolicy struct {
	Max        int           `json:"max"` // retries after the first attempt; 0: none
	Backoff    time.Duration `json:"-"`   // wait before the first retry, doubled each time
	MaxBackoff time.Duration `json:"-"`   // cap on the wait
}

// Queue is the durable queue behind one producer output. All consumers of
// that output read the same queue, each through its own consumer group, so
// every consuming flowlet sees every event once.
type Queue struct {
	Name     string `json:"name"` // "<producer>.<output>"
	Producer string `json:"producer"`
	Output   string `json:"output"`
	// Key is the name of the partition key the producer must set on each
	// event it enqueues here, when a group hashes by it; "" otherwise. All
	// hash groups of a queue share it, because events are partitioned once,
	// at enqueue.
	Key string `json:"key,omitempty"`
	// Partitions is the queue's partition count as a connection set it;
	// 0 means the queue backend's default (64). Order is kept within a
	// partition: a queue of 1 partition keeps its events in commit order.
	Partitions int `json:"partitions,omitempty"`
	// Groups are the consumer groups, one per consuming flowlet, in
	// topological order of the consumers.
	Groups []*Group `json:"groups"`
}

// Group is one consuming flowlet's view of a queue: how the queue's events
// are split among the flowlet's instances.
type Group struct {
	Name      string   `json:"name"` // the consuming flowlet
	Strategy  Strategy `json:"strategy"`
	Key       string   `json:"key,omitempty"` // set only for Hash, and then equal to the queue's Key
	Instances int      `json:"instances"`     // the consuming flowlet's instance count
}

// Connection is one "connections" entry with defaults applied.
type Connection struct {
	From     string   `json:"from"`   // producing flowlet
	Output   string   `json:"output"` // producing output; DefaultOutput when not written
	To       string   `json:"to"`     // consuming flowlet
	Strategy Strategy `json:"strategy"`
	Key      string   `json:"key,omitempty"`
	// Partitions as written (0: not set; see Queue.Partitions).
	Partitions int      `json:"partitions,omitempty"`
	Pos        Position `json:"pos"`
}

// Queue returns the name of the queue this connection reads from.
func (c *Connection) Queue() string { return QueueName(c.From, c.Output) }

// Strategy is how a consumer group splits a queue among the consuming
// flowlet's instances. Package queue implements them over partitions and
// has the exact semantics.
type Strategy string

const (
	// Fifo lets any idle instance take the next events; it balances load
	// best but gives no per-key ordering.
	Fifo Strategy = "fifo"
	// RoundRobin spreads events evenly over the instances.
	RoundRobin Strategy = "round_robin"
	// Hash sends all events with the same value of the queue's Key to the
	// same instance.
	Hash Strategy = "hash"
)

var strategyNames = []string{string(Fifo), string(RoundRobin), string(Hash)}

// Defaults and limits of the app format; specs/app-yaml.md documents them.
const (
	DefaultOutput     = "out"
	DefaultStrategy   = Fifo
	DefaultInstances  = 1
	MaxInstances      = 1024
	DefaultPartitions = 64   // as package queue creates
	MaxPartitions     = 4096 // as package queue allows
	DefaultBatchSize  = 100
	MaxBatchSize      = 100_000
	// MaxRetries bounds retries.max: the runtime counts tries as max+1,
	// which must not overflow (and a million retries is forever already).
	MaxRetries = 1_000_000
)

// DefaultRetry is the retry policy of a flowlet that sets no retries.
var DefaultRetry = RetryPolicy{Max: 3, Backoff: 10 * time.Millisecond, MaxBackoff: time.Second}

// ReservedOutputs are output names the runtime uses itself: "<flowlet>.dlq"
// holds a flowlet's dead letters and "<flowlet>.dlq-replay" feeds them back.
var ReservedOutputs = []string{"dlq", "dlq-replay"}

// QueueName is the name of the queue behind a producer's output,
// "<producer>.<output>".
func QueueName(producer, output string) string { return producer + "." + output }

// Flowlet returns the flowlet called name, or nil.
func (p *Plan) Flowlet(name string) *Flowlet {
	for _, f := range p.Flowlets {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Queue returns the queue called name ("producer.output"), or nil.
func (p *Plan) Queue(name string) *Queue {
	for _, q := range p.Queues {
		if q.Name == name {
			return q
		}
	}
	return nil
}

// buildPlan turns a spec that passed validation into a Plan.
func buildPlan(spec *appSpec, g *graph) *Plan {
	p := &Plan{App: spec.app.val, Runtime: spec.runtime.plan()}
	byName := map[string]*Flowlet{}
	rank := map[string]int{} // topological position
	for i, fs := range topoOrder(spec.flowlets, g.edges) {
		f := &Flowlet{
			Name:      fs.name,
			Type:      fs.typ.val,
			Plugin:    fs.plugin.val,
			Instances: orDefault(fs.instances, DefaultInstances),
			BatchSize: orDefault(fs.batchSize, DefaultBatchSize),
			Retry: RetryPolicy{
				Max:        orDefault(fs.retryMax, DefaultRetry.Max),
				Backoff:    orDefault(fs.backoff, DefaultRetry.Backoff),
				MaxBackoff: orDefault(fs.maxBackoff, DefaultRetry.MaxBackoff),
			},
			Tick:   fs.tick.val,
			Config: fs.config,
			Pos:    fs.pos,
		}
		p.Flowlets = append(p.Flowlets, f)
		byName[f.Name] = f
		rank[f.Name] = i
	}

	queues := map[string]*Queue{}
	for _, e := range g.edges {
		p.Connections = append(p.Connections, &Connection{
			From: e.from, Output: e.output, To: e.to, Strategy: e.strategy, Key: e.key, Partitions: e.partitions, Pos: e.pos,
		})
		name := QueueName(e.from, e.output)
		q := queues[name]
		if q == nil {
			q = &Queue{Name: name, Producer: e.from, Output: e.output}
			queues[name] = q
			p.Queues = append(p.Queues, q)
		}
		if e.strategy == Hash {
			q.Key = e.key
		}
		if e.partitions != 0 {
			q.Partitions = e.partitions
		}
		q.Groups = append(q.Groups, &Group{Name: e.to, Strategy: e.strategy, Key: e.key, Instances: byName[e.to].Instances})
	}
	sort.SliceStable(p.Queues, func(i, j int) bool {
		a, b := p.Queues[i], p.Queues[j]
		if a.Producer != b.Producer {
			return rank[a.Producer] < rank[b.Producer]
		}
		return a.Output < b.Output
	})
	for _, q := range p.Queues {
		sort.SliceStable(q.Groups, func(i, j int) bool { return rank[q.Groups[i].Name] < rank[q.Groups[j].Name] })
		producer := byName[q.Producer]
		producer.Outputs = append(producer.Outputs, q.Output)
		for _, grp := range q.Groups {
			consumer := byName[grp.Name]
			consumer.Inputs = append(consumer.Inputs, q.Name)
		}
	}
	return p
}

func orDefault[T any](f field[T], def T) T {
	if f.set {
		return f.val
	}
	return def
}

// topoOrder sorts flowlets so that producers precede consumers, breaking
// ties by file order so the plan reads like the file. The graph is known to
// be acyclic.
func topoOrder(flowlets []*flowletSpec, edges []*edge) []*flowletSpec {
	index := make(map[string]int, len(flowlets))
	for i, f := range flowlets {
		index[f.name] = i
	}
	indegree := make([]int, len(flowlets))
	next := make([][]int, len(flowlets))
	for _, e := range edges {
		from, to := index[e.from], index[e.to]
		next[from] = append(next[from], to)
		indegree[to]++
	}
	ready := &intHeap{}
	for i, d := range indegree {
		if d == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]*flowletSpec, 0, len(flowlets))
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, flowlets[i])
		for _, j := range next[i] {
			if indegree[j]--; indegree[j] == 0 {
				heap.Push(ready, j)
			}
		}
	}
	return order
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// MarshalJSON writes the flowlet with its tick as a Go duration ("1s"),
// the way the app file does; no tick, no field.
func (f Flowlet) MarshalJSON() ([]byte, error) {
	type plain Flowlet
	var tick string
	if f.Tick > 0 {
		tick = f.Tick.String()
	}
	return json.Marshal(struct {
		plain
		Tick string `json:"tick,omitempty"`
	}{plain(f), tick})
}

// MarshalJSON writes the policy's durations as Go durations ("10ms").
func (r RetryPolicy) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Max        int    `json:"max"`
		Backoff    string `json:"backoff"`
		MaxBackoff string `json:"max_backoff"`
	}{r.Max, r.Backoff.String(), r.MaxBackoff.String()})
}
