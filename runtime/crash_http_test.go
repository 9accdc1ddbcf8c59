package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// ingestLog is what the clients of an http_source sent and what was
// acknowledged (200).
type ingestLog struct {
	mu    sync.Mutex
	sent  map[string]bool
	acked map[string]bool
}

// ingestClient posts requests of 1-4 lines with ids unique to the test
// ("cG-R-L") to url until stop is closed, recording each id as sent before
// the request and as acknowledged after a 200.
func (l *ingestLog) ingestClient(g int, url string, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(uint64(g), 7))
	cl := &http.Client{Timeout: 5 * time.Second}
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		ids := make([]string, 1+r.IntN(4))
		for i := range ids {
			ids[i] = fmt.Sprintf("c%d-%d-%d", g, n, i)
		}
		l.mu.Lock()
		for _, id := range ids {
			l.sent[id] = true
		}
		l.mu.Unlock()
		resp, err := cl.Post(url, "text/plain", strings.NewReader(strings.Join(ids, "\n")))
		if err != nil {
			// No app (between runs) or the run was killed: sent, not
			// acknowledged. Wait a little before the next.
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			l.mu.Lock()
			for _, id := range ids {
				l.acked[id] = true
			}
			l.mu.Unlock()
		}
	}
}

// TestCrashHTTPIngest kills the CLI at least 20 times while clients post to
// its http_source; the events then drain. Every event of a request that was
// answered 200 is counted exactly once, every other event at most once.
func TestCrashHTTPIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	yaml := `
app: crashhttp
flowlets:
  src: {type: http_source, config: {addr: "` + addr + `", path: /in}}
  count: {type: t_count, instances: 2, batch_size: 50}
connections:
  - {from: src, to: count}
`
	writeApp(t, dir, yaml)
	dataDir := filepath.Join(dir, ".flowrun", "crashhttp")
	log := &ingestLog{sent: map[string]bool{}, acked: map[string]bool{}}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	stopClients := sync.OnceFunc(func() { close(stop); clients.Wait() })
	defer stopClients()
	for g := range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			log.ingestClient(g, "http://"+addr+"/in", stop)
		}()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for kill := range 20 {
		c := startCrashChild(t, dir, crashRunArgs(kill, "run", "app.yaml", "--log-level", "warn")...)
		if appURL(dataDir, c.cmd.Process.Pid, c.exited) == "" {
			t.Fatalf("run %d ended: %v\n%s", kill, c.err, c.stderr.String())
		}
		// The kill's moment: no ordering is assumed. A run that ends before
		// it (it has no --drain: an error) fails the test.
		if !c.stopAfter(t, kill, time.Duration(rng.IntN(300))*time.Millisecond, nil) {
			t.Fatalf("run %d ended before its kill\n%s", kill, c.stderr.String())
		}
	}
	stopClients()

	// The last run, in process, until what the source took is consumed.
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{DataDir: dataDir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(time.Minute) // a hang detector
	for !queuesConsumed(a.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("the queues did not drain: %+v", a.Status().Queues)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("last run: %v", err)
	}
	got := seen(t, a, "count")
	total := counter(t, a, "count", "n", "total")

	log.mu.Lock()
	defer log.mu.Unlock()
	var sum int64
	for id, n := range got {
		sum += n
		if n != 1 || !log.sent[id] {
			t.Errorf("%q counted %d times (sent: %v)", id, n, log.sent[id])
		}
	}
	lost := 0
	for id := range log.acked {
		if got[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("%q was acknowledged, not counted", id)
			}
		}
	}
	if lost > 0 || sum != total {
		t.Errorf("%d acknowledged events lost; counter total %d, seen %d", lost, total, sum)
	}
	if len(log.acked) == 0 {
		t.Error("no request was acknowledged: the test tested nothing")
	}
	t.Logf("%d sent, %d acknowledged, %d counted", len(log.sent), len(log.acked), len(got))
}

// queuesConsumed: every consumer group has consumed its queue.
func queuesConsumed(st runtime.Status) bool {
	for _, q := range st.Queues {
		for _, lag := range q.Lag {
			if lag != 0 {
				return false
			}
		}
	}
	return st.Ready
}
