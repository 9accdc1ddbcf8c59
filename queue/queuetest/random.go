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
	groups := hashAndFIFO(t, e, 3)
	committed, producersDone := randomProducers(t, e, producers, perProducer)
	total := int64(producers * perProducer)
	results := consumeGroups(t, groups, total, 9, func(g queue.Group, i int, rng *rand.Rand) func() ([]queue.Entry, bool) {
		c, err := e.Queues.Consumer("q", g.Name, i)
		return func() ([]queue.Entry, bool) {
			if err != nil {
				t.Error(err) // not Fatal: another goroutine
				return nil, false
			}
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
				return nil, true
			}
			if err != nil {
				t.Error(err)
				return nil, false
			}
			return got, true
		}
	})
	producersDone()
	checkOncePerGroup(t, groups, results, committed, total)
}

// randomProducers starts producers goroutines that each commit perProducer
// events p<i>-<n> into queue q, in transactions of random sizes (a fifth
// aborted, their events sent again), with random keys and priorities. It
// returns the committed payloads and a function that waits for the
// producers and checks that they committed all.
func randomProducers(t *testing.T, e *Env, producers, perProducer int) (*sync.Map, func()) {
	var committed sync.Map // payload → true
	var nCommitted atomic.Int64
	var pw sync.WaitGroup
	for pi := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			rng := rand.New(rand.NewPCG(uint64(pi), 7))
			p, err := e.Queues.Producer("q")
			if err != nil {
				t.Error(err) // not Fatal: another goroutine
				return
			}
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
	return &committed, func() {
		pw.Wait()
		if n := nCommitted.Load(); n != int64(producers*perProducer) {
			t.Fatalf("committed %d, want %d", n, producers*perProducer)
		}
	}
}

// hashAndFIFO creates queue q (8 partitions) with group h (hash, hashInstances)
// and group f (FIFO, 2 instances), and returns the groups.
func hashAndFIFO(t *testing.T, e *Env, hashInstances int) []queue.Group {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 8}))
	groups := []queue.Group{{Name: "h", Strategy: queue.Hash, Instances: hashInstances}, {Name: "f", Strategy: queue.FIFO, Instances: 2}}
	for _, g := range groups {
		must(t, e.Queues.AddGroup("q", g))
	}
	return groups
}

// consumeGroups runs a goroutine per instance of each group until the group
// consumed total events (a minute at most) and returns what each group
// consumed, counted per payload. Each goroutine calls the step that worker
// makes for it: it returns the entries a committed transaction delivered
// (none after an abort), or false to stop.
func consumeGroups(t *testing.T, groups []queue.Group, total int64, seed uint64, worker func(g queue.Group, instance int, rng *rand.Rand) func() ([]queue.Entry, bool)) []map[string]int {
	var wg sync.WaitGroup
	results := make([]map[string]int, len(groups))
	for gi, g := range groups {
		results[gi] = map[string]int{}
		var mu sync.Mutex
		var consumed atomic.Int64
		for i := range g.Instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				step := worker(g, i, rand.New(rand.NewPCG(uint64(gi*10+i), seed)))
				deadline := time.Now().Add(60 * time.Second)
				for consumed.Load() < total && time.Now().Before(deadline) {
					got, ok := step()
					if !ok {
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
	wg.Wait()
	return results
}

// checkOncePerGroup checks that each group consumed every one of the total
// committed events once, and nothing else.
func checkOncePerGroup(t *testing.T, groups []queue.Group, results []map[string]int, committed *sync.Map, total int64) {
	t.Helper()
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
