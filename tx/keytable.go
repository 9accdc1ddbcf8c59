package tx

// keyTable is an open-addressing hash table from change-key hash to a uint64
// value, for the conflict index. Keys are already uniform 64-bit hashes, so
// their low bits index the table directly (no rehashing), and a lookup
// touches one slot run, usually one cache line; Go's map rehashes and probes
// a control word first. A value of 0 means absent: "deleting" stores 0 and
// the slot stays occupied until the next rebuild.
type keyTable struct {
	slots []kv // power-of-two length; key 0 marks an empty slot
	used  int  // occupied slots, zero values included
}

type kv struct{ k, v uint64 }

func newKeyTable(capacity int) keyTable {
	n := 16
	for n*3/4 < capacity {
		n *= 2
	}
	return keyTable{slots: make([]kv, n)}
}

// fix keeps 0 free as the empty marker; hash 0 sharing a slot with hash 1
// can at worst cause a spurious conflict.
func fix(k uint64) uint64 {
	if k == 0 {
		return 1
	}
	return k
}

func (t *keyTable) get(k uint64) uint64 {
	k = fix(k)
	mask := uint64(len(t.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == k {
			return s.v
		}
		if s.k == 0 {
			return 0
		}
	}
}

// set stores v under k.
func (t *keyTable) set(k, v uint64) { t.swap(k, v) }

// swap stores v under k and returns the value it replaced (0 if absent), in
// one probe.
func (t *keyTable) swap(k, v uint64) uint64 {
	k = fix(k)
	if (t.used+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == k {
			old := s.v
			s.v = v
			return old
		}
		if s.k == 0 {
			s.k, s.v = k, v
			t.used++
			return 0
		}
	}
}

// deleteIf removes k if it maps to v and reports whether it did. Entries
// after it in its probe run shift back into the gap (no tombstone), so a table
// with churn, like the holds, keeps short runs without periodic rebuilds.
func (t *keyTable) deleteIf(k, v uint64) bool {
	k = fix(k)
	mask := uint64(len(t.slots) - 1)
	i := k & mask
	for {
		s := &t.slots[i]
		if s.k == 0 {
			return false
		}
		if s.k == k {
			if s.v != v {
				return false
			}
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].k != 0; j = (j + 1) & mask {
		// The entry at j may move into the gap at i unless its home slot
		// lies cyclically in (i, j]: then i is before where it may sit.
		home := t.slots[j].k & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = kv{}
	t.used--
	return true
}

func (t *keyTable) grow() {
	old := t.slots
	t.slots = make([]kv, 2*len(old))
	t.used = 0
	for _, s := range old {
		if s.k != 0 && s.v != 0 {
			t.set(s.k, s.v)
		}
	}
}

// each calls fn for every key with a non-zero value.
func (t *keyTable) each(fn func(k, v uint64)) {
	for _, s := range t.slots {
		if s.k != 0 && s.v != 0 {
			fn(s.k, s.v)
		}
	}
}

func (t *keyTable) clear() {
	clear(t.slots)
	t.used = 0
}
