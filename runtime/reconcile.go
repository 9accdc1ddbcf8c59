package runtime

import (
	"fmt"
	"strings"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/queue"
)

// Reconciling the store with the app: an app file edited between runs gets
// its new queues and consumer groups, rescaled groups and removed groups.
// planStore works out every change without making any, so that a change
// the stored data cannot follow is refused with the store as it was, and
// `flowrun validate --store` can show a run's changes before it makes them.

// storeChange is one change a run makes to the store.
type storeChange struct {
	kind         changeKind
	queue, group string
	cfg          queue.Config
	g            queue.Group
	from         int // rescale: the stored instance count
	oldStrategy  queue.Strategy
	lost         int64 // remove: unconsumed events the group drops; orphan: events nobody reads
	groups       string
}

type changeKind int

const (
	createQueue changeKind = iota
	addGroup
	rescaleGroup
	restrategyGroup
	removeGroup
	orphanQueue // no change: a queue the app no longer has
)

func (c storeChange) String() string {
	switch c.kind {
	case createQueue:
		return fmt.Sprintf("create queue %s", c.queue)
	case addGroup:
		return fmt.Sprintf("add consumer group %s (%s×%d) to queue %s, starting where the queue's other groups are", c.g.Name, c.g.Strategy, c.g.Instances, c.queue)
	case rescaleGroup:
		return fmt.Sprintf("rescale consumer group %s of queue %s from %d to %d instances", c.group, c.queue, c.from, c.g.Instances)
	case restrategyGroup:
		return fmt.Sprintf("change consumer group %s of queue %s from %s to %s", c.group, c.queue, c.oldStrategy, c.g.Strategy)
	case removeGroup:
		return fmt.Sprintf("remove consumer group %s of queue %s, dropping %d unconsumed events", c.group, c.queue, c.lost)
	default:
		return fmt.Sprintf("keep queue %s, no longer in the app: %d events nobody will read (groups: %s)", c.queue, c.lost, c.groups)
	}
}

// storePlan is what a run of plan changes in a store.
type storePlan struct {
	changes []storeChange
	records []string // key, value, … of appmeta.go to write after the changes
}

// planStore works out the changes a run of plan makes to st, or the reason
// it cannot run on it. It changes nothing.
func planStore(plan *planner.Plan, st *store) (storePlan, error) {
	var sp storePlan
	recorded, err := st.checkApp(plan.App)
	if err != nil {
		return sp, err
	}
	if !recorded {
		sp.records = append(sp.records, appNameKey, plan.App)
	}
	list, err := st.queues.List()
	if err != nil {
		return sp, err
	}
	have := map[string]queue.QueueInfo{}
	for _, q := range list {
		have[q.Name] = q
	}
	type want struct {
		name   string
		cfg    queue.Config
		groups []queue.Group
		exact  bool // remove groups not listed
		key    *string
	}
	var wants []want
	for _, q := range plan.Queues {
		w := want{name: q.Name, exact: true, cfg: queue.Config{MaxEventBytes: eventMaxBytes, Partitions: q.Partitions}, key: &q.Key}
		for _, g := range q.Groups {
			w.groups = append(w.groups, queue.Group{Name: g.Name, Strategy: queue.Strategy(g.Strategy), Instances: g.Instances})
		}
		wants = append(wants, w)
	}
	for _, f := range plan.Flowlets {
		wants = append(wants, want{name: DLQName(f.Name), cfg: queue.Config{MaxEventBytes: dlqMaxEventBytes}})
		if len(f.Inputs) > 0 {
			wants = append(wants, want{name: ReplayName(f.Name), cfg: queue.Config{MaxEventBytes: dlqMaxEventBytes}, exact: true,
				groups: []queue.Group{{Name: f.Name, Strategy: queue.Hash, Instances: f.Instances}}})
		}
	}

	planned := map[string]bool{}
	for _, w := range wants {
		planned[w.name] = true
		info, ok := have[w.name]
		if w.key != nil {
			rec, recorded, err := st.getMeta(queueKeyMeta + w.name)
			if err != nil {
				return sp, err
			}
			if ok && !recorded && !hasHashGroup(info) {
				// A store from before the record: a queue no group hashed
				// was partitioned without a key. (With a hash group the key
				// is taken to be the app's, as before the record.)
				rec, recorded = "", true
			}
			if ok && recorded && rec != *w.key && *w.key != "" {
				// Hash groups will read, by the new key, what the old one
				// partitioned: the kept groups' backlogs, and a new group's
				// (it starts where all existing groups are).
				if n := unconsumedBy(info, w.groups); n > 0 {
					return sp, fmt.Errorf("queue %s holds %d events not consumed yet that were partitioned by %s, and the app now partitions it by %s: their per-key order could not be kept — let them drain with the app as it was (flowrun run --drain), or use a new data directory",
						w.name, n, describeKey(rec), describeKey(*w.key))
				}
			}
			if !recorded || rec != *w.key {
				sp.records = append(sp.records, queueKeyMeta+w.name, *w.key)
			}
		}
		if !ok {
			sp.changes = append(sp.changes, storeChange{kind: createQueue, queue: w.name, cfg: w.cfg})
		} else if w.cfg.Partitions != 0 && info.Config.Partitions != w.cfg.Partitions {
			return sp, fmt.Errorf("queue %s has %d partitions and the app now asks for %d: a queue's partition count is fixed when it is created (keep partitions: %d, or use a new data directory)",
				w.name, info.Config.Partitions, w.cfg.Partitions, info.Config.Partitions)
		}
		existing := map[string]queue.GroupInfo{}
		for _, g := range info.Groups {
			existing[g.Name] = g
		}
		for _, g := range w.groups {
			old, ok := existing[g.Name]
			delete(existing, g.Name)
			if !ok {
				sp.changes = append(sp.changes, storeChange{kind: addGroup, queue: w.name, g: g})
				continue
			}
			// A strategy only says which instance reads which partition
			// (the cursors are per partition); a key's order rests on the
			// partitioning, which the key check above guards.
			if old.Strategy != g.Strategy {
				sp.changes = append(sp.changes, storeChange{kind: restrategyGroup, queue: w.name, group: g.Name, g: g, oldStrategy: old.Strategy})
			}
			if old.Instances != g.Instances {
				sp.changes = append(sp.changes, storeChange{kind: rescaleGroup, queue: w.name, group: g.Name, g: g, from: old.Instances})
			}
		}
		if w.exact {
			for _, g := range info.Groups { // in the stored order
				if _, gone := existing[g.Name]; gone {
					sp.changes = append(sp.changes, storeChange{kind: removeGroup, queue: w.name, group: g.Name, lost: g.Lag})
				}
			}
		}
	}
	// A queue the app no longer has keeps its data (the producer or the
	// connection may come back), but nobody reads it now.
	for _, q := range list {
		if n := unconsumed(q); !planned[q.Name] && n > 0 {
			var groups []string
			for _, g := range q.Groups {
				groups = append(groups, fmt.Sprintf("%s (%d)", g.Name, g.Lag))
			}
			sp.changes = append(sp.changes, storeChange{kind: orphanQueue, queue: q.Name, lost: n, groups: strings.Join(groups, ", ")})
		}
	}
	return sp, nil
}

// reconcile makes the changes planStore works out (queues first, then each
// queue's groups in the app's order, new groups before removed ones, so that
// a group replacing another starts where it was).
func (a *App) reconcile() error {
	sp, err := planStore(a.plan, a.st)
	if err != nil {
		return err
	}
	qs := a.st.queues
	for _, c := range sp.changes {
		switch c.kind {
		case createQueue:
			err = qs.CreateQueue(c.queue, c.cfg)
		case addGroup:
			err = qs.AddGroup(c.queue, c.g)
		case rescaleGroup:
			a.log.Info("rescaling consumer group", "queue", c.queue, "group", c.group, "from", c.from, "to", c.g.Instances)
			err = qs.Rescale(c.queue, c.group, c.g.Instances)
		case restrategyGroup:
			a.log.Info("changing the strategy of a consumer group", "queue", c.queue, "group", c.group, "from", c.oldStrategy, "to", c.g.Strategy)
			err = qs.SetStrategy(c.queue, c.group, c.g.Strategy)
		case removeGroup:
			a.log.Warn("removing consumer group no longer in the app", "queue", c.queue, "group", c.group, "dropped_unconsumed", c.lost)
			err = qs.RemoveGroup(c.queue, c.group)
		case orphanQueue:
			a.log.Warn("a queue no longer in the app holds events nobody will read", "queue", c.queue, "unconsumed", c.lost, "groups", c.groups)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	if len(sp.records) > 0 {
		return a.st.setMeta(sp.records...)
	}
	return nil
}

// CheckStore works out what a run of plan would change in the store at
// dataDir, without changing the app's queues, groups or records: the
// changes, one line each, or the reason the run would be refused. The store
// is opened as the read commands open it (Badger's crash recovery runs, as
// on any open).
func CheckStore(plan *planner.Plan, dataDir string) ([]string, error) {
	st, err := openStore(dataDir, storeOptions{durable: true, existing: true, evictInterval: -1, gcInterval: -1})
	if err != nil {
		return nil, err
	}
	defer st.close()
	sp, err := planStore(plan, st)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(sp.changes))
	for _, c := range sp.changes {
		out = append(out, c.String())
	}
	return out, nil
}

// unconsumedBy is how many of q's stored events the groups of the app (want)
// will read: the largest backlog of a kept group, or, when a group is new,
// of any stored group (a new group starts where they all are), or without
// stored groups everything stored.
func unconsumedBy(q queue.QueueInfo, want []queue.Group) int64 {
	stored := map[string]int64{}
	for _, g := range q.Groups {
		stored[g.Name] = g.Lag
	}
	var n int64
	for _, g := range want {
		lag, kept := stored[g.Name]
		if !kept {
			return unconsumed(q)
		}
		n = max(n, lag)
	}
	return n
}

func hasHashGroup(q queue.QueueInfo) bool {
	for _, g := range q.Groups {
		if g.Strategy == queue.Hash {
			return true
		}
	}
	return false
}

// unconsumed is how many stored events of a queue some group has not
// consumed yet, or, without groups, how many it stores.
func unconsumed(q queue.QueueInfo) int64 {
	if len(q.Groups) == 0 {
		return q.Events
	}
	var n int64
	for _, g := range q.Groups {
		n = max(n, g.Lag)
	}
	return n
}

func describeKey(k string) string {
	if k == "" {
		return "no key (spread over the partitions)"
	}
	return fmt.Sprintf("the key %q", k)
}
