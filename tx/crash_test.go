package tx

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/internal/badgerutil"
	"github.com/flowrun/flowrun/internal/crashtest"
)

// The crash test runs transfers in a child process (this test binary, re-run
// with crashChildEnv set), kills it with SIGKILL at random moments, restarts
// it, and checks after every restart and at the end that money is conserved,
// no update was lost, and every commit the child acknowledged survived.

const crashChildEnv = "FLOWRUN_TX_CRASH_CHILD"

type crashStore struct {
	db    *badger.DB
	c     *Coordinator
	table func() participantTable
}

func openCrashStore(dir, mode string) (*crashStore, error) {
	if err := badgerutil.RemoveEmptyLogFiles(filepath.Join(dir, "data")); err != nil {
		return nil, err
	}
	// The fast mode syncs through BadgerLog's group sync; the file mode
	// relies on Badger's SyncWrites for the data its participants persist.
	fast := mode != "file" // "fast" or "deferred" (FinishDeferred, acks after Wait)
	db, err := badger.Open(badgerTestOptions(filepath.Join(dir, "data"), !fast))
	if err != nil {
		return nil, err
	}
	var log Log
	if fast {
		log, err = NewBadgerLog(db, BadgerLogOptions{Sync: true})
	} else {
		log, err = OpenFileLog(filepath.Join(dir, "txlog"), FileLogOptions{Sync: true})
	}
	if err != nil {
		return nil, err
	}
	// The file mode ends recovered transactions at once (an embedded
	// coordinator); the fast mode keeps them until they expire.
	c, err := Open(Options{Log: log, SnapshotEvery: 100, EndRecoveredTransactions: mode == "file"})
	if err != nil {
		return nil, err
	}
	s := &crashStore{db: db, c: c}
	if fast {
		s.table = func() participantTable { return stagedTable{newTable(db, "t/")} }
	} else {
		s.table = func() participantTable { return newTable(db, "t/") }
	}
	return s, nil
}

// verify checks the invariants on the recovered store and returns the number
// of committed transfers.
func (s *crashStore) verify(acked []uint64) (int, error) {
	tb := s.table()
	ctx := s.c.NewContext(tb)
	if _, err := ctx.Start(time.Minute); err != nil {
		return 0, err
	}
	defer ctx.Abort(nil)
	var total, ops int64
	initialized := false
	for i := 0; i < modelAccounts; i++ {
		v, _, ok, err := tb.Get(acct(i))
		if err != nil {
			return 0, err
		}
		n, _, _, _ := tb.Get(opsKey(i))
		initialized = initialized || ok
		total += v
		ops += n
	}
	if !initialized {
		if len(acked) > 0 {
			return 0, errors.New("acknowledged transfers but no accounts")
		}
		return 0, nil
	}
	if total != modelAccounts*modelInitial {
		return 0, fmt.Errorf("total %d, want %d", total, modelAccounts*modelInitial)
	}
	transfers, _, _, _ := tb.Get("transfers")
	if ops != 2*transfers {
		return 0, fmt.Errorf("lost update: op counts %d for %d transfers", ops, transfers)
	}
	for _, id := range acked {
		if _, _, ok, _ := tb.Get("m" + strconv.FormatUint(id, 10)); !ok {
			return 0, fmt.Errorf("acknowledged commit %d is lost", id)
		}
	}
	if int64(len(acked)) > transfers {
		return 0, fmt.Errorf("%d acknowledged but only %d transfers committed", len(acked), transfers)
	}
	return int(transfers), nil
}

func readAcks(path string) []uint64 {
	b, _ := os.ReadFile(path)
	var ids []uint64
	for _, line := range strings.Split(string(b), "\n") {
		if id, err := strconv.ParseUint(line, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// crashChild is the child's body: verify, then transfer until killed.
func crashChild(dir, mode string) {
	s, err := openCrashStore(dir, mode)
	if err != nil {
		fmt.Printf("OPEN FAILED: %v\n", err)
		os.Exit(3)
	}
	ackPath := filepath.Join(dir, "acks")
	if err := crashtest.CutTornLine(ackPath); err != nil {
		fmt.Printf("ACKS: %v\n", err)
		os.Exit(3)
	}
	n, err := s.verify(readAcks(ackPath))
	if err != nil {
		fmt.Printf("VERIFY FAILED: %v\n", err)
		os.Exit(3)
	}
	fmt.Printf("VERIFIED %d\n", n)
	if n == 0 {
		tb := s.table()
		ctx := s.c.NewContext(tb)
		ctx.Start(time.Minute)
		if _, _, ok, _ := tb.Get(acct(0)); !ok {
			for i := 0; i < modelAccounts; i++ {
				tb.Put(acct(i), modelInitial)
				tb.Put(opsKey(i), 0)
			}
			tb.Put("transfers", 0)
		}
		if err := ctx.Finish(); err != nil {
			fmt.Printf("INIT FAILED: %v\n", err)
			os.Exit(3)
		}
	}
	acks, err := os.OpenFile(ackPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Printf("ACKS FAILED: %v\n", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	for w := 0; w < 4; w++ {
		go func(seed uint64) {
			rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
			tb := s.table()
			ctx := s.c.NewContext(tb)
			// Deferred: up to 3 commits visible but not yet durable per
			// worker; each is acknowledged only after its Wait.
			type inflight struct {
				p  Pending
				id uint64
			}
			var window []inflight
			ack := func(id uint64) {
				mu.Lock()
				acks.WriteString(strconv.FormatUint(id, 10) + "\n")
				mu.Unlock()
			}
			for {
				tx, err := ctx.Start(3 * time.Second)
				if err != nil {
					fmt.Printf("START FAILED: %v\n", err)
					os.Exit(3)
				}
				a, b := rng.IntN(modelAccounts), rng.IntN(modelAccounts)
				if a == b {
					ctx.Abort(nil)
					continue
				}
				va, _, _, _ := tb.Get(acct(a))
				vb, _, _, _ := tb.Get(acct(b))
				na, _, _, _ := tb.Get(opsKey(a))
				nb, _, _, _ := tb.Get(opsKey(b))
				nt, _, _, _ := tb.Get("transfers")
				amt := int64(rng.IntN(100))
				tb.Put(acct(a), va-amt)
				tb.Put(acct(b), vb+amt)
				tb.Put(opsKey(a), na+1)
				tb.Put(opsKey(b), nb+1)
				tb.Put("transfers", nt+1)
				tb.Put("m"+strconv.FormatUint(tx.ID, 10), 1)
				var p Pending
				if mode == "deferred" {
					p, err = ctx.FinishDeferred()
				} else {
					err = ctx.Finish()
				}
				if err != nil {
					if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotInProgress) {
						continue // rolled back: a conflict, or too slow and timed out
					}
					fmt.Printf("FINISH FAILED: %v\n", err)
					os.Exit(3)
				}
				if mode != "deferred" {
					ack(tx.ID)
					continue
				}
				window = append(window, inflight{p, tx.ID})
				for len(window) > 3 || (len(window) > 0 && rng.IntN(4) == 0) {
					if err := window[0].p.Wait(); err != nil {
						fmt.Printf("WAIT FAILED: %v\n", err)
						os.Exit(3)
					}
					ack(window[0].id)
					window = window[1:]
				}
			}
		}(uint64(w))
	}
	select {} // until killed
}

// TestMain turns this test binary into the crash test's child when asked.
func TestMain(m *testing.M) {
	if v := os.Getenv(crashChildEnv); v != "" {
		mode, dir, _ := strings.Cut(v, ":")
		crashChild(dir, mode)
		return
	}
	os.Exit(m.Run())
}

func TestCrashKill9(t *testing.T) {
	for _, mode := range []string{"fast", "deferred", "file"} {
		t.Run(mode, func(t *testing.T) { runCrashRounds(t, mode, 20) })
	}
}

func runCrashRounds(t *testing.T, mode string, rounds int) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	verified, lastTransfers := 0, -1
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), crashChildEnv+"="+mode+":"+dir)
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 64)
		go func() {
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Most rounds kill the child while it transfers, a random moment
		// after it verified the recovered state; some kill it during recovery.
		var out []string
		duringRecovery := rng.IntN(5) == 0
		deadline := time.After(2 * time.Minute)
	wait:
		for !duringRecovery {
			select {
			case line, ok := <-lines:
				if !ok {
					break wait
				}
				out = append(out, line)
				if strings.HasPrefix(line, "VERIFIED ") || strings.Contains(line, "FAILED") {
					break wait
				}
			case <-deadline:
				t.Fatalf("round %d: the child did not recover within 2 minutes", round)
			}
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		for line := range lines {
			out = append(out, line)
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL (%v):\n%s", round, err, strings.Join(out, "\n"))
		}
		for _, line := range out {
			if strings.Contains(line, "FAILED") {
				t.Fatalf("round %d: %s", round, line)
			}
			if n, ok := strings.CutPrefix(line, "VERIFIED "); ok {
				verified++
				v, _ := strconv.Atoi(n)
				if v < lastTransfers {
					t.Fatalf("round %d: committed transfers went back from %d to %d", round, lastTransfers, v)
				}
				lastTransfers = v
			}
		}
	}
	// The final check, in this process.
	s, err := openCrashStore(dir, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer s.db.Close()
	defer s.c.Close()
	if err := crashtest.CutTornLine(filepath.Join(dir, "acks")); err != nil { // the last child's
		t.Fatal(err)
	}
	acked := readAcks(filepath.Join(dir, "acks"))
	n, err := s.verify(acked)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d kills, %d verified restarts, %d transfers committed, %d acknowledged", mode, rounds, verified, n, len(acked))
	if verified < rounds/2 || len(acked) == 0 {
		t.Fatalf("too little happened: %d verified restarts, %d acks", verified, len(acked))
	}
}
