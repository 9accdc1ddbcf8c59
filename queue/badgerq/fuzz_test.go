package badgerq

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/flowrun/flowrun/queue"
)

// The decoders of what badgerq stores (keys.go, codec.go, the metadata in
// backend.go) and what reads their output (index.go, inspect.go) must take
// any bytes without a panic: a store can hold garbage (a torn write, a bug,
// a foreign key under "q"). The seeds run in every `go test`.

// FuzzEntryKey: decodeEntryKey accepts exactly the keys encode writes, and
// what it decodes encodes to the same bytes; undone (Info's lag) takes any
// key against any level state.
func FuzzEntryKey(f *testing.F) {
	for _, k := range []entryKey{
		{},
		{qid: 1, part: 3, prio: 9, wp: 17, chunk: 2, count: 5, size: 100, ms: 1700000000000},
		{qid: ^uint32(0), part: ^uint16(0), prio: 255, wp: ^uint64(0), chunk: ^uint32(0), count: ^uint32(0), size: ^uint32(0), ms: -1},
	} {
		f.Add(k.encode(nil), uint64(17), uint32(2), uint32(3), uint64(9))
	}
	f.Add([]byte("qe"), uint64(0), uint32(0), uint32(0), uint64(0))
	f.Add([]byte("qs\x00\x00\x00\x01\x00\x01\x00\x00"), uint64(1), uint32(0), uint32(0), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, wp uint64, chunk, idx uint32, hole uint64) {
		k, ok := decodeEntryKey(b)
		if ok != (len(b) == entryKeyLen && bytes.HasPrefix(b, []byte(entryTag))) {
			t.Fatalf("decodeEntryKey(%x) ok = %v", b, ok)
		}
		if !ok {
			return
		}
		if again := k.encode(nil); !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, k, again)
		}
		l := &levelState{prio: k.prio, pos: position{wp: wp, chunk: chunk, idx: idx}, holes: []position{{wp: hole, chunk: chunk, idx: idx}}}
		if n := undone(l, &k); n > k.count {
			t.Fatalf("undone %d of an entry of %d events", n, k.count)
		}
		if n := undone(nil, &k); n != k.count {
			t.Fatalf("undone %d with no state, want %d", n, k.count)
		}
	})
}

// FuzzStateValue: decodeStateValue takes any bytes and fails only with
// queue.ErrCorrupt; what it decodes encodes to a value that decodes the
// same; the partition index and a read plan take the decoded state.
func FuzzStateValue(f *testing.F) {
	st := partState{consumed: 7, expired: 2, levels: []levelState{
		{prio: 9, pos: position{wp: 30, chunk: 1, idx: 4}, holes: []position{{wp: 12}, {wp: 20, chunk: 2, idx: 1}}},
		{prio: 0, pos: position{wp: 5}},
	}}
	f.Add(encodeStateValue(stateVersion{wp: 40, st: st}, stateVersion{wp: 0, st: partState{}}))
	f.Add(encodeStateValue(stateVersion{st: st}))
	f.Add(encodeStateValue())
	f.Add([]byte{valueVersion, 3, 1, 2})
	f.Add([]byte{valueVersion, 1, 0, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 200, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := decodeStateValue(b)
		if err != nil {
			if !errors.Is(err, queue.ErrCorrupt) {
				t.Fatalf("decodeStateValue: %v, not queue.ErrCorrupt", err)
			}
			return
		}
		again, err := decodeStateValue(encodeStateValue(vs...))
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", vs, err)
		}
		if len(vs) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(again, vs) {
			t.Fatalf("re-encoded %+v decodes to %+v", vs, again)
		}
		var ix partIndex
		ix.raise(9, 31, 2)
		ix.raise(0, 3, 1)
		for i := range vs {
			st := vs[i].st
			_ = levelsToRead(nil, ix.snapshot(nil), &st)
			c := st.clone()
			for j := range c.levels {
				_ = c.levels[j].cursor()
			}
			if m := meet(&c, &st); m == nil && len(st.levels) > 0 {
				t.Fatalf("meet of a state with itself is nil")
			}
		}
	})
}

// FuzzQueueMeta: decodeMeta takes any bytes and fails only with
// queue.ErrCorrupt; what it accepts the backend can run on (newQueueRT,
// and the partition and instance arithmetic of producers and consumers).
func FuzzQueueMeta(f *testing.F) {
	good := `{"ID":3,"Config":{"Partitions":4,"TTL":0,"MaxEvents":0,"MaxBytes":0,"FullWait":0,"MaxEventBytes":1048576},"Groups":[{"ID":1,"Name":"g","Strategy":"hash","Instances":2}],"NextGroup":2}`
	f.Add("q", []byte(good))
	f.Add("q", []byte(`{"ID":3,"Config":{"Partitions":-1,"MaxEventBytes":1},"NextGroup":1}`))
	f.Add("q", []byte(`{"ID":3,"Config":{"Partitions":0,"MaxEventBytes":1},"NextGroup":1}`))
	f.Add("q", []byte(`{"ID":3,"Config":{"Partitions":1152921504606846976,"MaxEventBytes":1},"NextGroup":1}`))
	f.Add("q", []byte(`{"ID":3,"Config":{"Partitions":4,"MaxEventBytes":1},"Groups":[{"ID":1,"Name":"g","Strategy":"fifo","Instances":0}],"NextGroup":2}`))
	f.Add("q", []byte(`{"ID":3,"Config":{"Partitions":4,"MaxEventBytes":1},"Groups":[{"ID":1,"Name":"g","Strategy":"fifo","Instances":1},{"ID":1,"Name":"g","Strategy":"fifo","Instances":1}],"NextGroup":2}`))
	f.Add("a/b", []byte(good))
	f.Add("", []byte(good))
	f.Add("q", []byte(`{garbage`))
	f.Add("q", []byte(nil))
	f.Add("q", []byte(`null`))
	f.Fuzz(func(t *testing.T, name string, v []byte) {
		m, err := decodeMeta(name, v)
		if err != nil {
			if !errors.Is(err, queue.ErrCorrupt) {
				t.Fatalf("decodeMeta: %v, not queue.ErrCorrupt", err)
			}
			return
		}
		q := newQueueRT(name, m)
		P := q.cfg.Partitions
		if P < 1 || P > queue.MaxPartitions || len(q.index) != P {
			t.Fatalf("accepted %d partitions (index %d)", P, len(q.index))
		}
		for _, g := range q.groups {
			if g.meta.Instances < 1 || len(g.slots) != P {
				t.Fatalf("accepted group %+v with %d slots", g.meta, len(g.slots))
			}
			_ = P % g.meta.Instances
		}
	})
}
