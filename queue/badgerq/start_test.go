package badgerq

import (
	"reflect"
	"testing"
)

// meetLevel keeps an event consumed only where both sides consumed it.
func TestMeetLevel(t *testing.T) {
	pos := func(wp uint64, chunk, idx uint32) position { return position{wp: wp, chunk: chunk, idx: idx} }
	for _, c := range []struct {
		name string
		a, b levelState
		want levelState
	}{
		{"lower position wins",
			levelState{pos: pos(10, 2, 5)}, levelState{pos: pos(10, 1, 7)},
			levelState{pos: pos(10, 1, 7)}},
		{"a hole below the lower position stays, at the lesser progress",
			levelState{pos: pos(20, 0, 0), holes: []position{pos(5, 1, 0), pos(7, 0, 3)}},
			levelState{pos: pos(15, 0, 0), holes: []position{pos(7, 0, 1)}},
			levelState{pos: pos(15, 0, 0), holes: []position{pos(5, 1, 0), pos(7, 0, 1)}}},
		{"a hole at or above the lower position is covered by it",
			levelState{pos: pos(20, 0, 0), holes: []position{pos(12, 0, 0), pos(18, 0, 2)}},
			levelState{pos: pos(12, 0, 0)},
			levelState{pos: pos(12, 0, 0)}},
		{"the other side's holes count too, sorted",
			levelState{pos: pos(30, 0, 0), holes: []position{pos(9, 0, 0)}},
			levelState{pos: pos(30, 0, 0), holes: []position{pos(3, 2, 2), pos(25, 0, 0)}},
			levelState{pos: pos(30, 0, 0), holes: []position{pos(3, 2, 2), pos(9, 0, 0), pos(25, 0, 0)}}},
		{"a hole at the position's own pointer is kept as the position (the review's case; a hole there and the position read the rest of the pointer twice)",
			levelState{pos: pos(40, 1, 0), holes: []position{pos(40, 0, 0)}},
			levelState{pos: pos(40, 2, 0)},
			levelState{pos: pos(40, 0, 0)}},
		{"the other side's partial progress on the lower position's pointer bounds a hole there",
			levelState{pos: pos(50, 3, 0), holes: []position{pos(50, 1, 5)}},
			levelState{pos: pos(50, 1, 2)},
			levelState{pos: pos(50, 1, 2)}},
		{"a hole on the lower position's pointer against the other side's own progress on it",
			levelState{pos: pos(60, 0, 9), holes: []position{pos(60, 0, 4)}},
			levelState{pos: pos(70, 0, 0), holes: []position{pos(60, 0, 2)}},
			levelState{pos: pos(60, 0, 2)}},
		{"holes below a hole lowered to the position stay",
			levelState{pos: pos(80, 0, 5), holes: []position{pos(71, 0, 0)}},
			levelState{pos: pos(90, 0, 0), holes: []position{pos(80, 0, 1)}},
			levelState{pos: pos(80, 0, 1), holes: []position{pos(71, 0, 0)}}},
	} {
		for _, swap := range []bool{false, true} {
			a, b := c.a, c.b
			if swap {
				a, b = b, a
			}
			if got := meetLevel(a, b); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s (swapped %v): got %+v, want %+v", c.name, swap, got, c.want)
			}
		}
	}
	// A level one side has never read is not consumed at all.
	a := &partState{levels: []levelState{{prio: 1, pos: pos(4, 0, 0)}, {prio: 2, pos: pos(9, 0, 0)}}}
	b := &partState{levels: []levelState{{prio: 2, pos: pos(6, 0, 0)}}}
	if got := meet(a, b); len(got.levels) != 1 || got.levels[0].prio != 2 || got.levels[0].pos != pos(6, 0, 0) {
		t.Errorf("meet over levels: %+v", got)
	}
	if meet(&partState{levels: []levelState{{prio: 1}}}, nil) != nil {
		t.Error("meet with a side that consumed nothing is not nil")
	}
}
