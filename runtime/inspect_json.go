package runtime

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/flowrun/flowrun/flowlet"
)

// The JSON-ready views of a store that the CLI's read commands (`--json`)
// and the HTTP API both return, so that the two give the same documents
// (specs/cli.md, specs/http.md).

// Bytes is a key, value or payload in JSON: {"text": "..."} when it is valid
// UTF-8, {"base64": "..."} otherwise.
type Bytes struct {
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

// NewBytes encodes b.
func NewBytes(b []byte) Bytes {
	if utf8.Valid(b) {
		s := string(b)
		return Bytes{Text: &s}
	}
	s := base64.StdEncoding.EncodeToString(b)
	return Bytes{Base64: &s}
}

// Raw decodes b.
func (b Bytes) Raw() []byte {
	if b.Text != nil {
		return []byte(*b.Text)
	}
	if b.Base64 != nil {
		r, _ := base64.StdEncoding.DecodeString(*b.Base64)
		return r
	}
	return nil
}

// StateEntry is one key of a table (Value) or counter table (Count).
type StateEntry struct {
	Key   Bytes  `json:"key"`
	Value *Bytes `json:"value,omitempty"`
	Count *int64 `json:"count,omitempty"`
}

// StateTable is a scan of one table.
type StateTable struct {
	Name    string       `json:"name"`
	Kind    string       `json:"kind"`
	Entries []StateEntry `json:"entries"`
	// Truncated: the scan stopped at its byte bound (MaxListBytes) before
	// its limit; Next is the first key left out, where a scan from (Start)
	// goes on.
	Truncated bool   `json:"truncated,omitempty"`
	Next      *Bytes `json:"next,omitempty"`
}

// MaxListBytes bounds the keys, values and payloads (and listOverhead a
// record) that the HTTP API's listings (TailBounded, DeadLetterListBounded,
// ScanStateTableBounded) hold: they are built in the running app's memory,
// and the JSON answer is a few times larger still. An answer that reached
// it says so (truncated).
const MaxListBytes = 8 << 20

// listOverhead is what a listed record counts besides its bytes.
const listOverhead = 64

func keysSize(ks KeyList) int {
	n := 0
	for _, k := range ks {
		n += len(k.Name) + len(k.Value)
	}
	return n
}

// TableKind is the kind ("table" or "counters") of a flowlet's table as its
// stored data says, "table" when it holds both; "" when it holds no data.
func (s *Store) TableKind(app, flowletName, table string) (string, error) {
	ts, err := s.Tables(app, flowletName)
	if err != nil {
		return "", err
	}
	kind := ""
	for _, t := range ts {
		if t.Name == table && (kind == "" || t.Kind == "table") {
			kind = t.Kind
		}
	}
	return kind, nil
}

// GetStateEntry reads one key of table t; found is false when a
// key-value table has no such key (a counter reads 0).
func GetStateEntry(r StateReader, t TableInfo, key []byte) (e StateEntry, found bool, err error) {
	e.Key = NewBytes(key)
	if t.Kind == "counters" {
		n, err := r.Counters(t.Name).Get(key)
		e.Count = &n
		return e, true, err
	}
	v, ok, err := r.Table(t.Name).Get(key)
	if ok {
		b := NewBytes(v)
		e.Value = &b
	}
	return e, ok, err
}

// ScanStateTable reads the keys of table t that opts selects.
func ScanStateTable(r StateReader, t TableInfo, opts flowlet.ScanOptions) (StateTable, error) {
	return ScanStateTableBounded(r, t, opts, 0)
}

// ScanStateTableBounded is ScanStateTable holding at most maxBytes of keys
// and values (listOverhead an entry; 0: no bound, at least one entry):
// past it the scan stops with Truncated and Next set.
func ScanStateTableBounded(r StateReader, t TableInfo, opts flowlet.ScanOptions, maxBytes int) (StateTable, error) {
	out := StateTable{Name: t.Name, Kind: t.Kind, Entries: []StateEntry{}}
	held := 0
	full := func(key []byte, size int) bool {
		held += size + listOverhead
		if maxBytes > 0 && held > maxBytes && len(out.Entries) > 0 {
			next := NewBytes(key)
			out.Truncated, out.Next = true, &next
			return true
		}
		return false
	}
	if t.Kind == "counters" {
		it := r.Counters(t.Name).Scan(opts)
		defer it.Close()
		for it.Next() {
			if full(it.Key(), len(it.Key())+8) {
				break
			}
			n := it.Count()
			out.Entries = append(out.Entries, StateEntry{Key: NewBytes(it.Key()), Count: &n})
		}
		return out, it.Err()
	}
	it := r.Table(t.Name).Scan(opts)
	defer it.Close()
	for it.Next() {
		if full(it.Key(), len(it.Key())+len(it.Value())) {
			break
		}
		v := NewBytes(it.Value())
		out.Entries = append(out.Entries, StateEntry{Key: NewBytes(it.Key()), Value: &v})
	}
	return out, it.Err()
}

// QueueJSON is one queue with its depth and consumer groups.
type QueueJSON struct {
	Name       string      `json:"name"`
	Partitions int         `json:"partitions"`
	Events     int64       `json:"events"`
	Bytes      int64       `json:"bytes"`
	Groups     []GroupJSON `json:"groups"`
}

// GroupJSON is one consumer group of a queue.
type GroupJSON struct {
	Name      string `json:"name"`
	Strategy  string `json:"strategy"`
	Instances int    `json:"instances"`
	Lag       int64  `json:"lag"`
	Consumed  int64  `json:"consumed"`
}

// QueueList describes every queue (Queues, as JSON).
func (s *Store) QueueList() ([]QueueJSON, error) {
	qs, err := s.Queues()
	if err != nil {
		return nil, err
	}
	out := []QueueJSON{}
	for _, q := range qs {
		j := QueueJSON{Name: q.Name, Partitions: q.Config.Partitions, Events: q.Events, Bytes: q.Bytes, Groups: []GroupJSON{}}
		for _, g := range q.Groups {
			j.Groups = append(j.Groups, GroupJSON{g.Name, string(g.Strategy), g.Instances, g.Lag, g.Consumed})
		}
		out = append(out, j)
	}
	return out, nil
}

// EntryJSON is one stored queue entry.
type EntryJSON struct {
	ID        string     `json:"id"`
	Enqueued  time.Time  `json:"enqueued"`
	Keys      KeyList    `json:"keys,omitempty"`
	EventTime *time.Time `json:"event_time,omitempty"`
	TraceID   string     `json:"trace_id,omitempty"`
	Payload   Bytes      `json:"payload"`
}

// Tail returns the newest n (0 = all) stored entries of a queue, oldest
// first, by enqueue time. It reads up to maxScan entries (0 = all), in
// partition order (see Scan); keyName names the queue's partition key.
func (s *Store) Tail(queueName, keyName string, n, maxScan int) ([]EntryJSON, error) {
	return s.TailSelect(queueName, keyName, n, maxScan, QueueSelect{})
}

// newestEntries sorts es by enqueue time (stable: ties in scan order) and
// keeps the last n, dropping the others' payloads. A tail holds at most
// 2n entries so, whatever the queue's size: an entry dropped had n
// entries after it in that order already, and every later entry comes
// after those.
func newestEntries(es []QueueEntry, n int) []QueueEntry {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Enqueued.Before(es[j].Enqueued) })
	k := copy(es, es[len(es)-n:])
	clear(es[k:])
	return es[:k]
}

// tailRetained, set by tests only, is told how many entries TailSelect
// holds after each one it scanned.
var tailRetained func(int)

// TailSelect is Tail of the entries sel selects.
func (s *Store) TailSelect(queueName, keyName string, n, maxScan int, sel QueueSelect) ([]EntryJSON, error) {
	out, _, err := s.TailBounded(queueName, keyName, n, maxScan, 0, sel)
	return out, err
}

func entrySize(e *QueueEntry) int {
	return len(e.Payload) + keysSize(e.Keys) + len(e.ID) + len(e.TraceID) + listOverhead
}

// newestWithin keeps the newest entries of es (sorted by enqueue time)
// whose sizes add up to at most maxBytes (at least one), and their size.
func newestWithin(es []QueueEntry, maxBytes int) ([]QueueEntry, int) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Enqueued.Before(es[j].Enqueued) })
	held, i := 0, len(es)
	for i > 0 && (i == len(es) || held+entrySize(&es[i-1]) <= maxBytes) {
		i--
		held += entrySize(&es[i])
	}
	k := copy(es, es[i:])
	clear(es[k:])
	return es[:k], held
}

// TailBounded is TailSelect holding at most maxBytes of entries (payload,
// keys, id; listOverhead each; 0: no bound): the newest that fit, at least
// one, with truncated when fewer than n (0: every entry selected) are
// returned for it. While scanning it holds at most twice that (and 2n
// entries).
func (s *Store) TailBounded(queueName, keyName string, n, maxScan, maxBytes int, sel QueueSelect) (_ []EntryJSON, truncated bool, _ error) {
	var es []QueueEntry
	held, seen := 0, 0
	err := s.ScanSelect(queueName, keyName, maxScan, sel, func(e QueueEntry) bool {
		e.Payload = append([]byte(nil), e.Payload...)
		es = append(es, e)
		seen++
		held += entrySize(&e)
		if n > 0 && len(es)/2 >= n { // not 2*n: a huge n wraps negative
			es = newestEntries(es, n)
			held = 0
			for i := range es {
				held += entrySize(&es[i])
			}
		}
		if maxBytes > 0 && held > 2*maxBytes {
			// An entry dropped here has newer ones of more than maxBytes
			// after it already: it is not in the answer.
			es, held = newestWithin(es, maxBytes)
		}
		if h := tailRetained; h != nil {
			h(len(es))
		}
		return true
	})
	if err != nil {
		return nil, false, err
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Enqueued.Before(es[j].Enqueued) })
	if n > 0 && len(es) > n {
		es = es[len(es)-n:]
	}
	if maxBytes > 0 {
		es, _ = newestWithin(es, maxBytes)
	}
	want := seen
	if n > 0 {
		want = min(n, seen)
	}
	truncated = len(es) < want
	out := []EntryJSON{}
	for _, e := range es {
		j := EntryJSON{ID: e.ID, Enqueued: e.Enqueued, Keys: e.Keys, TraceID: e.TraceID, Payload: NewBytes(e.Payload)}
		if !e.EventTime.IsZero() {
			t := e.EventTime
			j.EventTime = &t
		}
		out = append(out, j)
	}
	return out, truncated, nil
}

// DeadLetterJSON is one dead letter with its payload as Bytes (the embedded
// DeadLetter's Payload is not part of the JSON).
type DeadLetterJSON struct {
	DeadLetter
	Payload Bytes `json:"payload"`
}

// MarshalJSON writes an event time RFC 3339 cannot (see wideTime) in the
// same layout with its year as it is, last.
func (d DeadLetterJSON) MarshalJSON() ([]byte, error) {
	type plain DeadLetterJSON
	if !wideTime(d.EventTime) {
		return json.Marshal(plain(d))
	}
	return json.Marshal(struct {
		plain
		EventTime string `json:"event_time"`
	}{plain(d), d.EventTime.Format(time.RFC3339Nano)})
}

// MarshalJSON: as DeadLetterJSON's.
func (e EntryJSON) MarshalJSON() ([]byte, error) {
	type plain EntryJSON
	if e.EventTime == nil || !wideTime(*e.EventTime) {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		plain
		EventTime string `json:"event_time"`
	}{plain(e), e.EventTime.Format(time.RFC3339Nano)})
}

// wideTime reports an event time whose year is outside 0–9999: Go's
// time.Time refuses to write it as JSON (RFC 3339 has four-digit years), so
// one such event, which queues and dead letters keep, failed a whole
// listing (dlq ls --json, queue tail --json and their HTTP reads).
func wideTime(t time.Time) bool {
	y := t.Year()
	return y < 0 || y > 9999
}

// DeadLetterList returns up to limit (0 = all) dead letters of each of the
// flowlets, in that order.
func (s *Store) DeadLetterList(flowlets []string, limit int) ([]DeadLetterJSON, error) {
	out, _, err := s.DeadLetterListBounded(flowlets, limit, 0)
	return out, err
}

// DeadLetterListBounded is DeadLetterList holding at most maxBytes of dead
// letters (payload, error, keys, ids; listOverhead each; 0: no bound, at
// least one): it stops at the first that does not fit, with truncated
// (that one and the rest, of its flowlet and the next ones, are left out).
func (s *Store) DeadLetterListBounded(flowlets []string, limit, maxBytes int) (_ []DeadLetterJSON, truncated bool, _ error) {
	out := []DeadLetterJSON{}
	held := 0
	for _, fl := range flowlets {
		err := s.DeadLetters(fl, limit, func(d DeadLetter) bool {
			held += len(d.Payload) + len(d.Error) + keysSize(d.Keys) + len(d.Input) + len(d.EventID) + len(d.TraceID) + listOverhead
			if maxBytes > 0 && held > maxBytes && len(out) > 0 {
				truncated = true
				return false
			}
			out = append(out, DeadLetterJSON{DeadLetter: d, Payload: NewBytes(d.Payload)})
			return true
		})
		if err != nil || truncated {
			return out, truncated, err
		}
	}
	return out, false, nil
}

// DLQFlowlets names the flowlets that have a dead-letter queue in the store.
func (s *Store) DLQFlowlets() ([]string, error) {
	qs, err := s.Queues()
	if err != nil {
		return nil, err
	}
	var fls []string
	for _, q := range qs {
		if isDLQ(q.Name) {
			fls = append(fls, flowletOfQueue(q.Name))
		}
	}
	return fls, nil
}

// KeyList is an event's partition keys. Its JSON is an object of key name
// to value ({"path": "/a"}), in the keys' order, as ingest takes them.
type KeyList []flowlet.KeyValue

// MarshalJSON writes {"name": "value", ...}.
func (l KeyList) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, kv := range l {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(kv.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(kv.Value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads an object of key name to value (sorted by name: JSON
// objects have no order).
func (l *KeyList) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	*l = (*l)[:0]
	for _, k := range names {
		*l = append(*l, flowlet.KeyValue{Name: k, Value: m[k]})
	}
	return nil
}
