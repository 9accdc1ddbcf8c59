package queuetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

var errChaos = errors.New("chaos abort")

// testRandomized runs concurrent producers and consumers of two groups, with
// random batch sizes, keys, priorities and aborts on both sides, and checks
// that every committed event was consumed exactly once per group.
func testRandomized(t *testing.T, e *Env) {
	const producers, perProducer = 4, 1500
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 8}))
	groups := []queue.Group{{Name: "h", Strategy: queue.Hash, Instances: 3}, {Name: "f", Strategy: queue.FIFO, Instances: 2}}
	for _, g := range groups {
		must(t, e.Queues.AddGroup("q", g))
	}
	var committed sync.Map // payload → true
	var nCommitted atomic.Int64
	var pw sync.WaitGroup
	for pi := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			rng := rand.New(rand.NewPCG(uint64(pi), 7))
			p, err := e.Queues.Producer("q")
			must(t, err)
			for i := 0; i < perProducer; {
				n := min(1+rng.IntN(40), perProducer-i)
				var batch []string
				abort := rng.IntN(5) == 0
				err := Step(e.Coord, func() error {
					for j := 0; j < n; j++ {
						s := fmt.Sprintf("p%d-%d", pi, i+j)
						batch = append(batch, s)
						evt := queue.Event{Payload: []byte(s), Priority: uint8(rng.IntN(3))}
						if rng.IntN(2) == 0 {
							evt.Key = []byte(fmt.Sprint(rng.IntN(30)))
						}
						if err := p.Enqueue(context.Background(), evt); err != nil {
							return err
						}
					}
					if abort {
						return errChaos
					}
					return nil
				}, p)
				if abort {
					if !errors.Is(err, errChaos) {
						t.Errorf("abort: %v", err)
					}
					continue // the same numbers are used again
				}
				if err != nil {
					t.Error(err)
					return
				}
				for _, s := range batch {
					committed.Store(s, true)
				}
				nCommitted.Add(int64(len(batch)))
				i += n
			}
		}()
	}
	total := int64(producers * perProducer)
	var cw sync.WaitGroup
	results := make([]map[string]int, len(groups))
	for gi, g := range groups {
		results[gi] = map[string]int{}
		var mu sync.Mutex
		var consumed atomic.Int64
		for i := range g.Instances {
			cw.Add(1)
			go func() {
				defer cw.Done()
				rng := rand.New(rand.NewPCG(uint64(gi*10+i), 9))
				c, err := e.Queues.Consumer("q", g.Name, i)
				must(t, err)
				deadline := time.Now().Add(60 * time.Second)
				for consumed.Load() < total && time.Now().Before(deadline) {
					var got []queue.Entry
					abort := rng.IntN(6) == 0
					err := Step(e.Coord, func() (err error) {
						got, err = c.Dequeue(1 + rng.IntN(50))
						if err == nil && abort {
							err = errChaos
						}
						return err
					}, c)
					if abort || errors.Is(err, tx.ErrConflict) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					for _, en := range got {
						results[gi][string(en.Payload)]++
					}
					mu.Unlock()
					consumed.Add(int64(len(got)))
				}
			}()
		}
	}
	pw.Wait()
	cw.Wait()
	if nCommitted.Load() != total {
		t.Fatalf("committed %d, want %d", nCommitted.Load(), total)
	}
	for gi, res := range results {
		if int64(len(res)) != total {
			t.Errorf("group %s consumed %d distinct events, want %d", groups[gi].Name, len(res), total)
		}
		for s, n := range res {
			if n != 1 {
				t.Errorf("group %s: %s consumed %d times", groups[gi].Name, s, n)
			}
			if _, ok := committed.Load(s); !ok {
				t.Errorf("group %s: consumed %s, which never committed", groups[gi].Name, s)
			}
		}
	}
}
