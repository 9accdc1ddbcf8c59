package badgerq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/internal/crashtest"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// sink records consumed event ids in the consumer's own transaction (an
// exactly-once sink on the same DB): key "zc/<id>/<consumer wp>", so a
// duplicate delivery shows up as a second key.
type sink struct {
	db  *badger.DB
	t   *tx.Tx
	ids []string
}

func (s *sink) StartTx(t *tx.Tx) error  { s.t, s.ids = t, s.ids[:0]; return nil }
func (s *sink) UpdateTx(t *tx.Tx) error { s.t = t; return nil }
func (s *sink) ChangeKeys() [][]byte    { return nil }
func (s *sink) PostCommit()             {}
func (s *sink) Rollback() error         { return nil }
func (s *sink) Store() any              { return s.db }
func (s *sink) Persist() error          { return errors.New("sink: fast path only") }
func (s *sink) Stage(dst []tx.Write) ([]tx.Write, error) {
	for _, id := range s.ids {
		dst = append(dst, tx.Write{Key: fmt.Appendf(nil, "zc/%s/%d", id, s.t.WritePointer), Value: []byte{1}})
	}
	return dst, nil
}

type crashNode struct {
	db    *badger.DB
	coord *tx.Coordinator
	b     *Backend
	qs    *queue.Queues
}

func openCrashNode(fail func(error), dir string) *crashNode {
	db, err := OpenDB(filepath.Join(dir, "db"), true)
	if err != nil {
		fail(err)
	}
	bl, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: true})
	if err != nil {
		fail(err)
	}
	coord, err := tx.Open(tx.Options{Log: bl})
	if err != nil {
		fail(err)
	}
	b, err := Open(db, Options{Coordinator: coord, FastPath: true, Sync: true})
	if err != nil {
		fail(err)
	}
	qs := queue.New(b)
	if err := qs.CreateQueue("crash", queue.Config{Partitions: 8}); err != nil && !errors.Is(err, queue.ErrExists) {
		fail(err)
	}
	if err := qs.AddGroup("crash", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 2}); err != nil && !errors.Is(err, queue.ErrExists) {
		fail(err)
	}
	return &crashNode{db: db, coord: coord, b: b, qs: qs}
}

// consume runs one consumer step for instance i; it returns how many events
// it consumed.
func (n *crashNode) consume(fail func(error), c queue.Consumer, s *sink) int {
	var got int
	err := queuetest.Step(n.coord, func() error {
		es, err := c.Dequeue(50)
		for _, e := range es {
			s.ids = append(s.ids, string(e.Payload))
		}
		got = len(es)
		return err
	}, c, s)
	if err != nil {
		fail(err)
	}
	return got
}

// TestMain runs the crash child instead of the tests when the parent asks.
func TestMain(m *testing.M) {
	if dir := os.Getenv("BADGERQ_CRASH_DIR"); dir != "" {
		crashChild(dir)
		os.Exit(1) // unreachable: the child runs until killed
	}
	os.Exit(m.Run())
}

// crashChild produces and consumes until it is killed.
func crashChild(dir string) {
	fail := func(err error) { log.Fatal(err) }
	n := openCrashNode(fail, dir)
	if err := crashtest.CutTornLine(filepath.Join(dir, "acks")); err != nil {
		fail(err)
	}
	acks, err := os.OpenFile(filepath.Join(dir, "acks"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	for i := range 2 {
		c, err := n.qs.Consumer("crash", "g", i)
		if err != nil {
			fail(err)
		}
		go func() {
			s := &sink{db: n.db}
			for {
				if n.consume(fail, c, s) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	p, err := n.qs.Producer("crash")
	if err != nil {
		fail(err)
	}
	run := os.Getenv("BADGERQ_CRASH_RUN")
	for seq := 0; ; seq++ {
		var ids []string
		err := queuetest.Step(n.coord, func() error {
			for j := range 10 {
				id := fmt.Sprintf("r%s-%d-%d", run, seq, j)
				ids = append(ids, id)
				if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte(id), Key: []byte{byte(j)}}); err != nil {
					return err
				}
			}
			return nil
		}, p)
		if err != nil {
			fail(err)
		}
		// Acknowledged only after the commit returned, and synced.
		if _, err := acks.WriteString(strings.Join(ids, "\n") + "\n"); err != nil {
			fail(err)
		}
		if err := acks.Sync(); err != nil {
			fail(err)
		}
	}
}

// TestCrashRecovery kills a producing and consuming child with SIGKILL at
// random moments, restarts it, and finally checks that every acknowledged
// event was consumed exactly once and nothing was consumed twice.
func TestCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	const kills = 24
	for i := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BADGERQ_CRASH_DIR="+dir, fmt.Sprintf("BADGERQ_CRASH_RUN=%d", i))
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(350)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child %d did not die by SIGKILL (%v): %s", i, err, stderr.String())
		}
	}
	fatal := func(err error) { t.Fatal(err) }
	n := openCrashNode(fatal, dir)
	defer func() { n.b.Close(); n.coord.Close(); n.db.Close() }()
	for i := range 2 {
		c, err := n.qs.Consumer("crash", "g", i)
		if err != nil {
			t.Fatal(err)
		}
		s := &sink{db: n.db}
		for n.consume(fatal, c, s) > 0 {
		}
	}
	consumed := map[string]int{}
	err := n.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("zc/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := string(it.Item().Key()[3:])
			consumed[k[:strings.LastIndexByte(k, '/')]]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := crashtest.CutTornLine(filepath.Join(dir, "acks")); err != nil { // the last child's
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "acks"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acked := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id := sc.Text(); id != "" {
			acked++
			if consumed[id] != 1 {
				t.Errorf("acknowledged event %s consumed %d times", id, consumed[id])
			}
		}
	}
	for id, c := range consumed {
		if c != 1 {
			t.Errorf("event %s consumed %d times", id, c)
		}
	}
	t.Logf("%d kills, %d acknowledged events, %d consumed (the rest committed but unacknowledged when killed)", kills, acked, len(consumed))
	if acked == 0 {
		t.Fatal("children acknowledged nothing")
	}
}
