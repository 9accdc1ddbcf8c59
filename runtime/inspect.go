package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/state"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Store is an app's store opened for inspection and maintenance by the CLI's
// read commands (state, queue, dlq) and by tests and result exporters. It
// needs the store to itself: while an app runs on it, OpenStore fails with
// ErrLocked.
type Store struct {
	st *store
	// app is set for App.Inspect: the running app's store, which Close
	// leaves open.
	app *App
}

// OpenStore opens the store in dir, which must exist.
func OpenStore(dir string) (*Store, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("no store at %s (has the app run? use --data): %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("store %s: not a directory", dir)
	}
	st, err := openStore(dir, storeOptions{durable: true, existing: true, evictInterval: -1, gcInterval: -1})
	if err != nil {
		return nil, err
	}
	return &Store{st: st}, nil
}

// Close closes the store (nothing for the store of App.Inspect).
func (s *Store) Close() error {
	if s.app != nil {
		return nil
	}
	return s.st.close()
}

// Queues describes every queue: depth and lag per consumer group.
func (s *Store) Queues() ([]queue.QueueInfo, error) {
	exit, err := s.st.enter()
	if err != nil {
		return nil, err
	}
	defer exit()
	return s.st.queues.List()
}

// QueueEntry is a stored queue entry, decoded.
type QueueEntry struct {
	ID        string    `json:"id"`
	Queue     string    `json:"queue"`
	Enqueued  time.Time `json:"enqueued"`
	Keys      KeyList   `json:"keys,omitempty"`
	EventTime time.Time `json:"event_time,omitzero"`
	TraceID   string    `json:"trace_id,omitempty"`
	Payload   []byte    `json:"-"`
	// Dead is set for entries of a dead-letter queue or a replay queue
	// (dead letters on their way back in).
	Dead *DeadLetter `json:"-"`
}

// QueueSelect narrows a queue scan as HQueue's scanners do: some
// partitions, a range of entry ids by the producing transaction's write
// pointer (the middle number of an id "partition/priority/pointer.chunk.
// index"), a range of enqueue times. Bounds are inclusive; the zero value
// selects everything.
type QueueSelect struct {
	Partitions   []int
	From, To     uint64 // To 0: no bound
	Since, Until time.Time
}

// ParseUpperPointer reads QueueSelect.To as ParsePointer does, but a given
// bound of 0 is an error: To 0 means no bound, so "--to 0" listed every
// entry where it asked for none (write pointers start above 0).
func ParseUpperPointer(v string) (uint64, error) {
	n, err := ParsePointer(v)
	if err == nil && n == 0 && v != "" {
		return 0, fmt.Errorf("%q selects no entry: write pointers start above 0 (leave the bound out for none)", v)
	}
	return n, err
}

// ParsePointer reads a QueueSelect bound: an entry id as printed
// ("partition/priority/pointer.chunk.index") or a bare write pointer; ""
// is 0 (no bound).
func ParsePointer(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return n, nil
	}
	bad := fmt.Errorf("want an entry id such as 3/0/1042.0.7 or a write pointer such as 1042, not %q", v)
	// An entry id, every part a number in its range: a loose reading
	// ("abc/5", "5.x") took typos for bounds.
	parts := strings.Split(v, "/")
	if len(parts) != 3 {
		return 0, bad
	}
	rest := strings.Split(parts[2], ".")
	if len(rest) != 3 {
		return 0, bad
	}
	for _, f := range []struct {
		s    string
		bits int
	}{{parts[0], 16}, {parts[1], 8}, {rest[1], 32}, {rest[2], 32}} {
		if _, err := strconv.ParseUint(f.s, 10, f.bits); err != nil {
			return 0, bad
		}
	}
	n, err := strconv.ParseUint(rest[0], 10, 64)
	if err != nil {
		return 0, bad
	}
	return n, nil
}

// ParseInstant reads a QueueSelect time bound: RFC 3339, or a duration
// before now ("10m"); "" is the zero time (no bound).
func ParseInstant(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		if t.IsZero() {
			// The zero time means no bound: year 1 given as an --until
			// listed everything instead of nothing. A nanosecond later
			// selects the same entries (their times are milliseconds).
			t = t.Add(time.Nanosecond)
		}
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want a time such as 2026-11-21T10:00:00Z or a duration ago such as 10m, not %q", v)
}

// Scan calls fn for up to limit (0 = all) committed entries of a queue that
// are still stored (consumed entries are evicted in the background), in
// partition order. keyName names the entries' partition key (the hash
// connection's key); "" takes the name the store recorded for the queue.
func (s *Store) Scan(queueName, keyName string, limit int, fn func(QueueEntry) bool) error {
	return s.ScanSelect(queueName, keyName, limit, QueueSelect{}, fn)
}

// ScanSelect is Scan of the entries sel selects.
func (s *Store) ScanSelect(queueName, keyName string, limit int, sel QueueSelect, fn func(QueueEntry) bool) error {
	exit, err := s.st.enter()
	if err != nil {
		return err
	}
	defer exit()
	if keyName == "" {
		// Read without the app's plan (an app name, not its file): the
		// key name the store records for the queue, if any.
		if rec, ok, err := s.st.getMeta(queueKeyMeta + queueName); err != nil {
			return err
		} else if ok {
			keyName = rec
		}
	}
	dead := isDLQ(queueName) || isReplay(queueName)
	var derr error
	opts := queue.ScanOptions{Limit: limit, Partitions: sel.Partitions, From: sel.From, To: sel.To, Since: sel.Since, Until: sel.Until}
	err = s.st.queues.Scan(queueName, opts, func(e queue.Entry) bool {
		qe := QueueEntry{ID: e.ID.String(), Queue: queueName, Enqueued: e.Enqueued, EventTime: e.EventTime, TraceID: e.TraceID}
		if dead {
			d, err := decodeDeadLetter(flowletOfQueue(queueName), e.Payload)
			if err != nil {
				derr = fmt.Errorf("entry %s: %w", qe.ID, err)
				return false
			}
			// The event's headers are in the record; the entry has none.
			qe.Dead, qe.Payload, qe.Keys, qe.EventTime, qe.TraceID = &d, d.Payload, d.Keys, d.EventTime, d.TraceID
			return fn(qe)
		}
		if keyName != "" && e.Key != nil {
			qe.Keys = append(qe.Keys, flowlet.KeyValue{Name: keyName, Value: string(e.Key)})
		}
		var err error
		if qe.Keys, qe.Payload, err = decodeEnvelope(e.Payload, qe.Keys); err != nil {
			derr = fmt.Errorf("entry %s: %w", qe.ID, err)
			return false
		}
		return fn(qe)
	})
	return errors.Join(err, derr)
}

func isDLQ(q string) bool { return hasOutput(q, DLQOutput) }

// isReplay reports a flowlet's replay queue, which holds dead-letter
// records on their way back in (ReplayDeadLetters).
func isReplay(q string) bool { return hasOutput(q, ReplayOutput) }

func hasOutput(q, output string) bool {
	return len(q) > len(output)+1 && q[len(q)-len(output)-1:] == "."+output
}

func flowletOfQueue(q string) string {
	for i := len(q) - 1; i >= 0; i-- {
		if q[i] == '.' {
			return q[:i]
		}
	}
	return q
}

// DeadLetters calls fn for up to limit (0 = all) entries waiting in a
// flowlet's dead-letter queue.
func (s *Store) DeadLetters(flowletName string, limit int, fn func(DeadLetter) bool) error {
	exit, err := s.st.enter()
	if err != nil {
		return err
	}
	defer exit()
	if s.app != nil {
		s.app.adminMu.Lock()
		defer s.app.adminMu.Unlock()
	}
	q := DLQName(flowletName)
	info, err := s.st.queues.Info(q)
	if err != nil {
		return dlqOpenErr(flowletName, err)
	}
	// Entries below the replay group's cursor were replayed already and are
	// only waiting for eviction.
	skip := map[string]bool{}
	if len(info.Groups) > 0 {
		if err := s.replayed(q, skip); err != nil {
			return err
		}
	}
	n := 0
	return s.Scan(q, "", 0, func(e QueueEntry) bool {
		if skip[e.ID] {
			return true
		}
		n++
		if !fn(*e.Dead) {
			return false
		}
		return limit == 0 || n < limit
	})
}

// dlqOpenErr describes a failure to open a flowlet's dead-letter queue:
// "has no dead-letter queue" only when it is missing, not when the store
// failed (closed, say).
func dlqOpenErr(flowletName string, err error) error {
	if errors.Is(err, queue.ErrUnknownQueue) {
		return fmt.Errorf("flowlet %q has no dead-letter queue: %w", flowletName, err)
	}
	return fmt.Errorf("flowlet %q: opening its dead-letter queue: %w", flowletName, err)
}

// replayed collects the ids of DLQ entries the replay group consumed but
// eviction has not removed yet: everything stored minus what a fresh
// dequeue would return.
func (s *Store) replayed(q string, out map[string]bool) error {
	c, err := s.st.queues.Consumer(q, replayGroup, 0)
	if err != nil {
		return err
	}
	txc := s.st.coord.NewContext(c)
	if _, err := txc.Start(time.Minute); err != nil {
		return err
	}
	defer func() {
		if txc.Abort(nil) == nil {
			s.st.reads.Add(1)
		}
	}()
	pending := map[string]bool{}
	for {
		es, err := c.Dequeue(10000)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			pending[e.ID.String()] = true
		}
	}
	return s.st.queues.Scan(q, queue.ScanOptions{}, func(e queue.Entry) bool {
		if id := e.ID.String(); !pending[id] {
			out[id] = true
		}
		return true
	})
}

// DLQSize is the number of entries waiting in a flowlet's dead-letter queue.
func (s *Store) DLQSize(flowletName string) (int64, error) {
	exit, err := s.st.enter()
	if err != nil {
		return 0, err
	}
	defer exit()
	info, err := s.st.queues.Info(DLQName(flowletName))
	if err != nil {
		return 0, err
	}
	return dlqSize(info), nil
}

const replayGroup = "replay"

func dlqSize(q queue.QueueInfo) int64 {
	for _, g := range q.Groups {
		if g.Name == replayGroup {
			return g.Lag
		}
	}
	return q.Events
}

// ReplayDeadLetters moves the dead letters of a flowlet back to its input,
// in transactions: the flowlet consumes them (through the queue
// "<flowlet>.dlq-replay", delivered like its other input) when the app runs
// next. inputs are the queues the flowlet consumes in the current plan and
// keys their partition key names; entries from other inputs (failed ticks
// and publishes, queues no longer in the app) and truncated records (only a
// prefix of the payload is there) stay in the dead-letter queue.
// It returns how many entries were replayed and how many were kept.
//
// On the store of a running app (App.Inspect) the flowlet consumes them at
// once, and no compaction runs afterwards.
func (s *Store) ReplayDeadLetters(flowletName string, inputs map[string]string) (replayed, kept int, err error) {
	exit, err := s.st.enter()
	if err != nil {
		return 0, 0, err
	}
	defer exit()
	if s.app != nil {
		// The flowlet's instances are woken by the replay queue's commits.
		s.app.adminMu.Lock()
		defer s.app.adminMu.Unlock()
	}
	qs := s.st.queues
	dq, rq := DLQName(flowletName), ReplayName(flowletName)
	info, err := qs.Info(dq)
	if err != nil {
		return 0, 0, dlqOpenErr(flowletName, err)
	}
	if len(inputs) == 0 {
		return 0, 0, fmt.Errorf("flowlet %q consumes no input: its dead letters cannot be replayed (inspect them with dlq ls)", flowletName)
	}
	if _, err := qs.Info(rq); errors.Is(err, queue.ErrUnknownQueue) {
		return 0, 0, fmt.Errorf("flowlet %q has no replay queue (run the app once first): %w", flowletName, err)
	} else if err != nil {
		return 0, 0, fmt.Errorf("flowlet %q: opening its replay queue: %w", flowletName, err)
	}
	has := false
	for _, g := range info.Groups {
		has = has || g.Name == replayGroup
	}
	if !has {
		if err := qs.AddGroup(dq, queue.Group{Name: replayGroup, Strategy: queue.Hash, Instances: 1}); err != nil {
			return 0, 0, err
		}
		if info, err = qs.Info(dq); err != nil {
			return 0, 0, err
		}
	}
	todo := int(dlqSize(info))
	c, err := qs.Consumer(dq, replayGroup, 0)
	if err != nil {
		return 0, 0, err
	}
	back, err := qs.Producer(dq)
	if err != nil {
		return 0, 0, err
	}
	out, err := qs.Producer(rq)
	if err != nil {
		return 0, 0, err
	}
	txc := s.st.coord.NewContext(c, back, out)
	for done := 0; done < todo; {
		if _, err := txc.Start(time.Minute); err != nil {
			return replayed, kept, err
		}
		es, err := c.Dequeue(min(1000, todo-done))
		if err != nil {
			txc.Abort(nil)
			return replayed, kept, err
		}
		if len(es) == 0 {
			txc.Abort(nil)
			break
		}
		r, k := 0, 0
		for _, e := range es {
			d, derr := decodeDeadLetter(flowletName, e.Payload)
			keyName, ok := inputs[d.Input]
			if derr != nil || !ok || d.Truncated {
				err = back.Enqueue(context.Background(), queue.Event{Payload: e.Payload})
				k++
			} else {
				var key []byte
				for _, kv := range d.Keys {
					if kv.Name == keyName && keyName != "" {
						key = []byte(kv.Value)
					}
				}
				err = out.Enqueue(context.Background(), queue.Event{Payload: e.Payload, Key: key})
				r++
			}
			if err != nil {
				txc.Abort(nil)
				return replayed, kept, err
			}
		}
		if err := txc.Finish(); err != nil {
			return replayed, kept, err
		}
		replayed += r
		kept += k
		done += len(es)
	}
	if s.app != nil {
		return replayed, kept, nil // eviction runs in the background
	}
	return replayed, kept, qs.Maintain()
}

// TableInfo names one state table of a flowlet.
type TableInfo struct {
	Name string `json:"name"`
	// Kind is "table" (key-value) or "counters".
	Kind string `json:"kind"`
}

// Tables lists a flowlet's state tables and counter tables that hold data.
func (s *Store) Tables(app, flowletName string) ([]TableInfo, error) {
	exit, err := s.st.enter()
	if err != nil {
		return nil, err
	}
	defer exit()
	prefix := state.KeyPrefix(app, flowletName)
	var out []TableInfo
	err = s.st.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			k := it.Item().Key()[len(prefix):]
			end := bytes.IndexByte(k, 0)
			if len(k) < 2 || end < 1 {
				it.Next()
				continue
			}
			kind := "table"
			if k[0] == 'c' {
				kind = "counters"
			}
			name := string(k[1:end])
			out = append(out, TableInfo{Name: name, Kind: kind})
			seek := append(append([]byte(nil), prefix...), k[:end]...)
			it.Seek(append(seek, 1))
		}
		return nil
	})
	return out, err
}

// viewTimeout is the timeout of a state read's transaction: past it the
// coordinator takes the read for gone, but state GC still does not pass it
// (store.holdGC), so a read of any length gives the values as of its start.
var viewTimeout = time.Minute

// View runs fn with read access to a flowlet's state as of the last commit.
func (s *Store) View(app, flowletName string, fn func(st StateReader) error) error {
	return s.st.view(app, flowletName, fn)
}

// View runs fn with read access to a flowlet's state as of the last commit;
// it may run while the app runs.
func (a *App) View(flowletName string, fn func(st StateReader) error) error {
	return a.st.view(a.plan.App, flowletName, fn)
}

func (s *store) view(app, flowletName string, fn func(st StateReader) error) error {
	exit, err := s.enter()
	if err != nil {
		return err
	}
	defer exit()
	ss, err := state.Open(s.db, app, flowletName)
	if err != nil {
		return err
	}
	defer ss.Close()
	t, err := s.coord.StartShort(viewTimeout)
	if err != nil {
		return err
	}
	defer func() {
		if s.coord.Abort(t) == nil {
			s.reads.Add(1)
		}
	}()
	defer s.holdGC(t)() // also past viewTimeout
	if err := ss.StartTx(t); err != nil {
		return err
	}
	defer ss.Rollback()
	return fn(stateReader{ss})
}

// StateReader reads one flowlet's tables and counters.
type StateReader interface {
	Table(name string) flowlet.Table
	Counters(name string) flowlet.Counters
}

type stateReader struct{ s *state.Store }

func (r stateReader) Table(name string) flowlet.Table { return readOnlyTable{r.s.Table(name)} }
func (r stateReader) Counters(name string) flowlet.Counters {
	return readOnlyCounters{r.s.Counters(name)}
}

var errReadOnly = errors.New("runtime: state opened for reading")

type readOnlyTable struct{ *state.Table }

func (readOnlyTable) Put(_, _ []byte) error { return errReadOnly }
func (readOnlyTable) Delete(_ []byte) error { return errReadOnly }

type readOnlyCounters struct{ *state.Counters }

func (readOnlyCounters) Add(_ []byte, _ int64) error { return errReadOnly }

// TxStats returns the coordinator's counters.
func (s *Store) TxStats() tx.Stats { return s.st.coord.Stats() }
