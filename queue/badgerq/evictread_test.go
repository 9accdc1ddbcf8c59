package badgerq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// A group whose position rests at the end of the last entry of a level
// (its pointer, the chunk after the entry's last: a hole at the
// position's own pointer read to its end by a Dequeue that reached its max
// there, so the scan never went past it) has read that entry, but eviction
// judged by the pointer and kept it, and no read ever moves such a
// position (the partition index says there is nothing to read): the entry
// stayed in the depth until the next entry in that level was read. In a
// bounded queue its events held room that no consumer could free: with
// every event consumed, a producer got ErrQueueFull. And a pass skipped a
// level whose lowest position had moved only inside its pointer (it
// compared pointers), so the entries read meanwhile waited too. Found by a
// stress run (events left stored after every group read everything).
func TestEvictEntryReadToItsEnd(t *testing.T) {
	x := partialPersist(t, queue.Config{Partitions: 1, MaxEvents: 3}, "g")
	b, must := x.b, mustT(t)
	if got := x.deq("g", 10); len(got) != 0 {
		t.Fatalf("got %v of a producer in progress", got)
	}
	// A pass while the position is inside X (after its landed chunk, with a
	// hole at X): the next one must read the level again once the position
	// moved on inside the same pointer.
	must(b.evict())
	x.commit()
	// The hole read to the pointer's end fills the Dequeue: the position is
	// left at the end of X's last chunk.
	if got := fmt.Sprint(x.deq("g", 3)); got != "[x-0 x-1 x-2]" {
		t.Fatalf("after the commit: %s, want [x-0 x-1 x-2]", got)
	}
	if got := x.deq("g", 10); len(got) != 0 {
		t.Fatalf("again: %v", got)
	}
	must(b.evict())
	checkDepthStored(t, b, "q", 0, "after the pass")
	if info, err := b.Info("q"); err != nil || info.Events != 0 || info.Groups[0].Lag != 0 {
		t.Fatalf("depth %d, lag %d (%v) after the pass; every event consumed", info.Events, info.Groups[0].Lag, err)
	}
	p, err := b.Producer("q")
	must(err)
	ctx := b.opts.Coordinator.NewContext(p)
	_, err = ctx.Start(time.Minute)
	must(err)
	if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("z")}); errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("every event consumed, yet: %v", err)
	} else {
		must(err)
	}
	must(ctx.Finish())
}

// Two groups at the end of X's last chunk, one with a hole at X (it saw
// X's chunks land while X was in progress): a pass kept X (not read by
// every group). When that group read the hole, neither the lowest cursor,
// nor the lowest position, nor the holes below its pointer changed, so
// every later pass skipped the level and X stayed stored: the holes at the
// lowest position's own pointer count too now.
func TestEvictEntryReadToItsEndAfterHole(t *testing.T) {
	x := partialPersist(t, queue.Config{Partitions: 1}, "g", "h")
	b, must := x.b, mustT(t)
	for _, g := range []string{"g", "h"} {
		if got := x.deq(g, 10); len(got) != 0 {
			t.Fatalf("%s got %v of a producer in progress", g, got)
		}
	}
	x.land(1)
	x.land(2)
	// h passes the rest of X, in progress: position at X's end, hole at X.
	if got := x.deq("h", 10); len(got) != 0 {
		t.Fatalf("h got %v of a producer in progress", got)
	}
	x.commit()
	for _, g := range []string{"g", "h"} {
		if g == "h" {
			must(b.evict()) // g read X, h not yet: X stays
		}
		if got := fmt.Sprint(x.deq(g, 3)); got != "[x-0 x-1 x-2]" {
			t.Fatalf("%s after the commit: %s, want [x-0 x-1 x-2]", g, got)
		}
	}
	must(b.evict())
	checkDepthStored(t, b, "q", 0, "after the pass")
	if info, err := b.Info("q"); err != nil || info.Events != 0 {
		t.Fatalf("depth %d (%v) after every group read everything", info.Events, err)
	}
}
