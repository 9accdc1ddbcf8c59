package badgerq

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// BenchmarkSingleHop: producers enqueue batches in transactions while 1 or 2
// consumer instances dequeue + ack in theirs (fast path, BadgerLog; durable =
// BadgerLogOptions{Sync: true}, group commit). A consumer that found nothing
// aborts and waits on queue.Notifier's Ready (woken by the next producer
// commit) instead of polling. Each sub-benchmark runs three
// phases, each on a fresh DB with the same options:
//
//  1. full load: b.N events as fast as the producers go → events/s, MB/s and
//     the p99 enqueue-to-dequeue latency under full load (p99_full_ms);
//  2. half rate: producers paced at half the events/s of phase 1, for up to
//     b.N events or halfRateWindow → p50_ms and p99_ms enqueue-to-dequeue
//     (time from the Enqueue call to the consumer's commit returning);
//  3. raw Badger: a WriteBatch of the same events, one entry each (synced once
//     at the end when durable) → raw_MB/s and ratio = MB/s ÷ raw_MB/s.
//
// maxRSS_MiB is the process's peak RSS so far (VmHWM, cumulative across
// sub-benchmarks). Durable rows run with 1 and 4 producers: one sequential
// producer waits for one fsync per transaction, so it is bound by the disk's
// sync latency; several share each sync. Durable rows with inflight=8
// pipeline instead: every producer and consumer commits with
// Context.FinishDeferred and keeps up to 8 commits visible but not yet
// durable, waiting for the oldest (Pending.Wait) before an ninth; a producer
// counts its events only once their commit is durable. The latency is then to
// the consumer's commit becoming visible.
//
//	go test ./queue/badgerq -run '^$' -bench SingleHop -benchtime 20000x
//
// BADGERQ_BENCH_SYNCWRITES=1 makes durable rows use Badger's SyncWrites
// instead of the log's group sync (the mode before tx's group sync), for
// comparison.
func BenchmarkSingleHop(b *testing.B) {
	for _, durable := range []bool{false, true} {
		producers := []int{1}
		if durable {
			producers = []int{1, 4}
		}
		for _, size := range []int{100, 1024} {
			for _, batch := range []int{1, 100, 500} {
				for _, inst := range []int{1, 2} {
					for _, np := range producers {
						inflight := []int{1}
						if durable && np == 1 {
							inflight = []int{1, 8}
						}
						for _, depth := range inflight {
							h := hop{durable: durable, size: size, batch: batch, instances: inst, producers: np, inflight: depth}
							name := fmt.Sprintf("durable=%v/size=%d/batch=%d/instances=%d/producers=%d/inflight=%d", durable, size, batch, inst, np, depth)
							b.Run(name, func(b *testing.B) { benchHop(b, h) })
						}
					}
				}
			}
		}
	}
}

// halfRateWindow bounds the half-rate phase: percentiles over a few seconds
// of paced traffic are stable, and slow rows stay short.
const halfRateWindow = 4 * time.Second

type hop struct {
	durable                           bool
	size, batch, instances, producers int
	inflight                          int // commits per goroutine visible but not yet durable
}

// inflightWindow holds a goroutine's deferred commits, oldest first.
type inflightWindow []deferred

type deferred struct {
	p tx.Pending
	n int // events
}

// drain waits for the oldest commits until at most keep are left, calling
// durable with each one's events.
func (w *inflightWindow) drain(keep int, durable func(n int)) error {
	for len(*w) > keep {
		if err := (*w)[0].p.Wait(); err != nil {
			return err
		}
		durable((*w)[0].n)
		*w = (*w)[1:]
	}
	return nil
}

type hopResult struct {
	elapsed time.Duration
	events  int
	lat     []time.Duration // sampled enqueue-to-dequeue latencies, sorted
	tx      tx.Stats        // the coordinator's at the end
}

func (r hopResult) perSec() float64 { return float64(r.events) / r.elapsed.Seconds() }

func (r hopResult) pct(p int) float64 {
	if len(r.lat) == 0 {
		return 0
	}
	return float64(r.lat[min(len(r.lat)-1, len(r.lat)*p/100)].Microseconds()) / 1000
}

func benchHop(b *testing.B, h hop) {
	b.SetBytes(int64(h.size))
	full := runHop(b, h, b.N, 0, 0)
	b.StopTimer()
	rate := full.perSec() / 2
	half := runHop(b, h, min(b.N, int(rate*halfRateWindow.Seconds())+h.batch), rate, halfRateWindow)
	rawElapsed := rawBadger(b, h.durable, h.size, b.N)
	mbps := float64(b.N*h.size) / full.elapsed.Seconds() / 1e6
	rawMBps := float64(b.N*h.size) / rawElapsed.Seconds() / 1e6
	b.ReportMetric(full.perSec(), "events/s")
	b.ReportMetric(mbps, "MB/s")
	b.ReportMetric(rawMBps, "raw_MB/s")
	b.ReportMetric(mbps/rawMBps, "ratio")
	if h.durable && h.inflight == 1 {
		// Like for like: raw Badger made durable as often as the hop's
		// producer is (a sync after every batch) instead of once at the end.
		syncedMBps := float64(b.N*h.size) / rawBadgerSyncedBatches(b, h.size, h.batch, b.N).Seconds() / 1e6
		b.ReportMetric(syncedMBps, "raw_sync_MB/s")
		b.ReportMetric(mbps/syncedMBps, "ratio_sync")
	}
	b.ReportMetric(full.pct(99), "p99_full_ms")
	b.ReportMetric(half.perSec(), "half_events/s")
	b.ReportMetric(half.pct(50), "p50_ms")
	b.ReportMetric(half.pct(99), "p99_ms")
	b.ReportMetric(float64(peakRSS())/(1<<20), "maxRSS_MiB")
	if s := full.tx; s.LogSyncs > 0 {
		// The full phase's group commit: syncs per commit, and how many of
		// the syncs were held back for siblings (gathered) and joined.
		b.ReportMetric(float64(s.LogSyncs)/float64(s.Committed), "syncs/commit")
		b.ReportMetric(float64(s.LogGathers)/float64(s.LogSyncs), "gathered/sync")
		b.ReportMetric(float64(s.LogGathersJoined)/float64(s.LogSyncs), "joined/sync")
	}
}

// runHop moves total events through a fresh queue. rate > 0 paces the
// producers to that many events/s in all (open loop: a batch late on its
// schedule goes at once, stamped when it goes); window > 0 stops producing
// after that long.
func runHop(b *testing.B, h hop, total int, rate float64, window time.Duration) hopResult {
	dir := b.TempDir()
	opts := TunedOptions(dir, h.durable)
	logSync := h.durable
	if h.durable && os.Getenv("BADGERQ_BENCH_SYNCWRITES") != "" {
		// For comparison: Badger syncs each of its write batches itself.
		opts, logSync = opts.WithSyncWrites(true), false
	}
	qs, coord, closeQueue := openBenchQueue(b, opts, logSync, h.durable, h.instances)
	defer closeQueue()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}

	var produced, consumed atomic.Int64
	produced.Store(-1)              // unknown until the producers are done
	finished := make(chan struct{}) // closed once produced is known
	var latMu sync.Mutex
	var lat []time.Duration
	b.StartTimer()
	began := time.Now()
	var cw sync.WaitGroup
	for i := range h.instances {
		c, err := qs.Consumer("q", "g", i)
		must(err)
		cw.Add(1)
		go func() {
			defer cw.Done()
			ctx := coord.NewContext(c)
			var mine []time.Duration
			var pending inflightWindow
			defer func() {
				if err := pending.drain(0, func(int) {}); err != nil {
					b.Error(err)
				}
			}()
			for {
				if n := produced.Load(); n >= 0 && consumed.Load() >= n {
					break
				}
				got, p, err := dequeueTx(ctx, c, max(h.batch, 100), finished, h.inflight > 1)
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					continue // nothing was ready; woken since
				}
				pending = append(pending, deferred{p: p})
				if err := pending.drain(h.inflight-1, func(int) {}); err != nil {
					b.Error(err)
					return
				}
				now := time.Now().UnixNano()
				for k := 0; k < len(got); k += 16 {
					mine = append(mine, time.Duration(now-int64(binary.LittleEndian.Uint64(got[k].Payload))))
				}
				consumed.Add(int64(len(got)))
			}
			latMu.Lock()
			lat = append(lat, mine...)
			latMu.Unlock()
		}()
	}
	var pw sync.WaitGroup
	var sent atomic.Int64
	for pi := range h.producers {
		p, err := qs.Producer("q")
		must(err)
		pw.Add(1)
		go func() {
			defer pw.Done()
			payload := make([]byte, h.size)
			ctx := coord.NewContext(p)
			var pending inflightWindow
			count := func(n int) { sent.Add(int64(n)) }
			defer func() {
				if err := pending.drain(0, count); err != nil {
					b.Error(err)
				}
			}()
			per := (total + h.producers - 1) / h.producers
			mine := min(per, total-pi*per)
			for k, i := 0, 0; i < mine; k, i = k+1, i+h.batch {
				if rate > 0 {
					// This producer's k-th batch is due at k × its interval
					// (batches of all producers interleave evenly).
					due := began.Add(time.Duration((float64(k*h.producers+pi) * float64(h.batch) / rate) * 1e9))
					if d := time.Until(due); d > 50*time.Microsecond {
						time.Sleep(d)
					}
					if window > 0 && time.Since(began) > window {
						return
					}
				}
				n := min(h.batch, mine-i)
				pend, err := enqueueTx(ctx, p, payload, n, true, h.inflight > 1)
				if err != nil {
					b.Error(err)
					return
				}
				pending = append(pending, deferred{p: pend, n: n})
				if err := pending.drain(h.inflight-1, count); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	pw.Wait()
	produced.Store(sent.Load())
	close(finished)
	cw.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	slices.Sort(lat)
	return hopResult{elapsed: elapsed, events: int(consumed.Load()), lat: lat, tx: coord.Stats()}
}

// rawBadger writes the same events with a WriteBatch, one entry each, and
// when durable syncs once at the end.
func rawBadger(b *testing.B, durable bool, size, n int) time.Duration {
	db, err := badger.Open(TunedOptions(b.TempDir(), durable))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	payload := make([]byte, size)
	began := time.Now()
	wb := db.NewWriteBatch()
	key := make([]byte, 8)
	for i := range n {
		binary.BigEndian.PutUint64(key, uint64(i))
		if err := wb.Set(append([]byte(nil), key...), payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	if durable {
		if err := db.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(began)
}

// rawBadgerSyncedBatches writes the same events with one WriteBatch per
// batch, each flushed and made durable with DB.Sync before the next: what a
// producer that waits for every batch to be durable gets from raw Badger.
func rawBadgerSyncedBatches(b *testing.B, size, batch, n int) time.Duration {
	db, err := badger.Open(TunedOptions(b.TempDir(), true))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	payload := make([]byte, size)
	began := time.Now()
	for i := 0; i < n; i += batch {
		wb := db.NewWriteBatch()
		for j := i; j < min(i+batch, n); j++ {
			if err := wb.Set(binary.BigEndian.AppendUint64(nil, uint64(j)), payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := wb.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := db.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(began)
}

// peakRSS is VmHWM from /proc/self/status, in bytes.
func peakRSS() int64 {
	return procStatus("VmHWM:")[0]
}

// procStatus is the named kB fields of /proc/self/status, in bytes (0 for
// one it cannot read).
func procStatus(names ...string) []int64 {
	out := make([]int64, len(names))
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		for i, name := range names {
			if rest, ok := strings.CutPrefix(line, name); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				out[i] = kb << 10
			}
		}
	}
	return out
}

// openBenchQueue opens a fast-path backend on a fresh DB (opts) with queue
// "q" and RoundRobin group "g" of instances consumers. logSync is the
// BadgerLog's group sync, sync the backend's. closeQueue closes all.
func openBenchQueue(b *testing.B, opts badger.Options, logSync, sync bool, instances int) (qs *queue.Queues, coord *tx.Coordinator, closeQueue func()) {
	db, err := badger.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	bl, _ := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: logSync})
	coord, err = tx.Open(tx.Options{Log: bl})
	if err != nil {
		b.Fatal(err)
	}
	be, err := Open(db, Options{Coordinator: coord, FastPath: true, Sync: sync})
	if err != nil {
		b.Fatal(err)
	}
	closeQueue = func() {
		be.Close()
		coord.Close()
		db.Close()
	}
	qs = queue.New(be)
	if err := qs.CreateQueue("q", queue.Config{}); err != nil {
		closeQueue()
		b.Fatal(err)
	}
	if err := qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.RoundRobin, Instances: instances}); err != nil {
		closeQueue()
		b.Fatal(err)
	}
	return qs, coord, closeQueue
}

// enqueueTx enqueues n copies of payload in one transaction. stamp writes
// the time into the payload's first 8 bytes once the transaction started.
// deferred commits with FinishDeferred (else Finish: durable on return).
func enqueueTx(ctx *tx.Context, p queue.Producer, payload []byte, n int, stamp, deferred bool) (tx.Pending, error) {
	if _, err := ctx.Start(10 * time.Second); err != nil {
		return tx.Pending{}, err
	}
	if stamp {
		binary.LittleEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
	}
	for range n {
		if err := p.Enqueue(context.Background(), queue.Event{Payload: payload}); err != nil {
			return tx.Pending{}, ctx.Abort(err)
		}
	}
	return finish(ctx, deferred)
}

func finish(ctx *tx.Context, deferred bool) (tx.Pending, error) {
	if deferred {
		return ctx.FinishDeferred()
	}
	return tx.Pending{}, ctx.Finish()
}

// dequeueTx dequeues up to n events in one transaction and commits. Finding
// none, it aborts (which costs no log sync) and waits until a producer
// commits (c's queue.Notifier) or done is closed, and returns no events.
func dequeueTx(ctx *tx.Context, c queue.Consumer, n int, done <-chan struct{}, deferred bool) ([]queue.Entry, tx.Pending, error) {
	// Taken before the dequeue: a commit in between closes it.
	ready := c.(queue.Notifier).Ready()
	if _, err := ctx.Start(10 * time.Second); err != nil {
		return nil, tx.Pending{}, err
	}
	got, err := c.Dequeue(n)
	if err != nil || len(got) == 0 {
		if err := ctx.Abort(err); err != nil {
			return nil, tx.Pending{}, err
		}
		select {
		case <-ready: // a producer committed
		case <-done:
		}
		return nil, tx.Pending{}, nil
	}
	p, err := finish(ctx, deferred)
	return got, p, err
}

// sampleEvery calls sample at once and then every d until stop, which waits
// for the last call to return.
func sampleEvery(d time.Duration, sample func()) (stop func()) {
	quit := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			sample()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-sampled
	}
}

// BenchmarkBacklogRSS fills a queue that has a group but no consumer, so
// nothing is evicted, and samples the process's RSS every 250 ms while the
// backlog grows to backlogBytes (or for backlogTime, whichever comes first).
// It reports the RSS (anonymous + file-backed, and anonymous alone) at a
// quarter, half and all of the run and the peak, plus the backlog written:
// flat memory means the late samples match the early ones. Run it alone (the
// peak is per process):
//
//	go test ./queue/badgerq -run '^$' -bench BacklogRSS -benchtime 1x
func BenchmarkBacklogRSS(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchBacklog(b, size) })
	}
}

var (
	backlogBytes int64 = 2 << 30
	backlogTime        = 75 * time.Second
)

const (
	backlogBatch = 500
)

func init() {
	if v, err := strconv.ParseInt(os.Getenv("BADGERQ_BACKLOG_MIB"), 10, 64); err == nil {
		backlogBytes = v << 20
	}
	if v, err := time.ParseDuration(os.Getenv("BADGERQ_BACKLOG_TIME")); err == nil {
		backlogTime = v
	}
}

type rssSample struct {
	at        time.Duration
	bytes     int64 // backlog payload bytes so far
	rss, anon int64
}

func benchBacklog(b *testing.B, size int) {
	dir := b.TempDir()
	qs, coord, closeQueue := openBenchQueue(b, TunedOptions(dir, false), false, false, 1)
	defer closeQueue()
	p, err := qs.Producer("q")
	if err != nil {
		b.Fatal(err)
	}
	var written atomic.Int64
	var samples []rssSample
	began := time.Now()
	stopSampling := sampleEvery(250*time.Millisecond, func() {
		rss, anon := currentRSS()
		samples = append(samples, rssSample{at: time.Since(began), bytes: written.Load(), rss: rss, anon: anon})
	})
	ctx := coord.NewContext(p)
	payload := make([]byte, size)
	for written.Load() < backlogBytes && time.Since(began) < backlogTime {
		if _, err := enqueueTx(ctx, p, payload, backlogBatch, false, false); err != nil {
			b.Fatal(err)
		}
		written.Add(int64(backlogBatch * size))
	}
	elapsed := time.Since(began)
	stopSampling()
	info, err := qs.Info("q")
	if err != nil || info.Bytes != written.Load() {
		b.Fatalf("depth %d bytes after writing %d (%v)", info.Bytes, written.Load(), err)
	}
	at := func(frac float64) rssSample { return samples[min(len(samples)-1, int(float64(len(samples))*frac))] }
	var peak, peakAnon int64
	for _, s := range samples {
		peak, peakAnon = max(peak, s.rss), max(peakAnon, s.anon)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(float64(written.Load())/(1<<30), "backlog_GiB")
	b.ReportMetric(float64(written.Load())/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(mib(at(0.25).rss), "rss_25%_MiB")
	b.ReportMetric(mib(at(0.5).rss), "rss_50%_MiB")
	b.ReportMetric(mib(samples[len(samples)-1].rss), "rss_end_MiB")
	b.ReportMetric(mib(peak), "rss_max_MiB")
	b.ReportMetric(mib(at(0.25).anon), "anon_25%_MiB")
	b.ReportMetric(mib(samples[len(samples)-1].anon), "anon_end_MiB")
	b.ReportMetric(mib(peakAnon), "anon_max_MiB")
	b.ReportMetric(mib(dirBytes(dir)), "disk_MiB")
	if testing.Verbose() {
		for _, s := range samples {
			b.Logf("%6.1fs backlog %6.0f MiB rss %5.0f MiB anon %5.0f MiB", s.at.Seconds(), mib(s.bytes), mib(s.rss), mib(s.anon))
		}
	}
}

// currentRSS is VmRSS and RssAnon from /proc/self/status, in bytes.
func currentRSS() (rss, anon int64) {
	v := procStatus("VmRSS:", "RssAnon:")
	return v[0], v[1]
}

// BenchmarkSteadyRSS is the memory of a queue in steady use, the weblog
// pattern: a producer and a consumer run together, so the backlog stays
// small while the data written grows (to steadyBytes, BADGERQ_STEADY_MIB).
// Memory must follow the backlog, not the total written. It samples RssAnon,
// RssFile (the memory-mapped value-log and table files) and the Go heap
// every 250 ms and reports them at a quarter, half and all of the data
// written, and the peaks. Rows: 100 B events in batches of 500 (packed values
// of 50 KB: value log) and of 5 (500 B values: kept in the LSM; an eighth of
// the bytes, this row is bound by transactions/s). Run alone
// (-v prints every sample):
//
//	go test ./queue/badgerq -run '^$' -bench SteadyRSS -benchtime 1x
func BenchmarkSteadyRSS(b *testing.B) {
	for _, batch := range []int{500, 5} {
		total := steadyBytes
		if batch < 100 {
			total /= 8 // bound by transactions/s, not bytes
		}
		b.Run(fmt.Sprintf("size=100/batch=%d", batch), func(b *testing.B) { benchSteady(b, 100, batch, total) })
	}
}

var steadyBytes int64 = 1 << 30

func init() {
	if v, err := strconv.ParseInt(os.Getenv("BADGERQ_STEADY_MIB"), 10, 64); err == nil {
		steadyBytes = v << 20
	}
}

type steadySample struct {
	at                    time.Duration
	written               int64
	anon, file, heap, dsk int64
}

func benchSteady(b *testing.B, size, batch int, steadyBytes int64) {
	runtime.GC()
	dir := b.TempDir()
	qs, coord, closeQueue := openBenchQueue(b, TunedOptions(dir, false), false, false, 1)
	defer closeQueue()
	p, err := qs.Producer("q")
	if err != nil {
		b.Fatal(err)
	}
	c, err := qs.Consumer("q", "g", 0)
	if err != nil {
		b.Fatal(err)
	}
	var written, consumed atomic.Int64
	var samples []steadySample
	began := time.Now()
	var ms runtime.MemStats
	stopSampling := sampleEvery(250*time.Millisecond, func() {
		anon, file := currentRSSParts()
		runtime.ReadMemStats(&ms)
		samples = append(samples, steadySample{at: time.Since(began), written: written.Load(), anon: anon, file: file, heap: int64(ms.HeapInuse), dsk: dirBytes(dir)})
	})
	// The consumer keeps the backlog small; the producer waits when it is
	// more than maxLead bytes ahead.
	const maxLead = 32 << 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := coord.NewContext(c)
		for consumed.Load() < steadyBytes {
			got, _, err := dequeueTx(ctx, c, 4096, nil, false)
			if err != nil {
				b.Error(err)
				return
			}
			if len(got) == 0 {
				continue // nothing was ready; woken since
			}
			consumed.Add(int64(len(got) * size))
		}
	}()
	ctx := coord.NewContext(p)
	payload := make([]byte, size)
	for written.Load() < steadyBytes {
		if written.Load()-consumed.Load() > maxLead {
			time.Sleep(time.Millisecond)
			continue
		}
		if _, err := enqueueTx(ctx, p, payload, batch, false, false); err != nil {
			b.Fatal(err)
		}
		written.Add(int64(batch * size))
	}
	<-done
	elapsed := time.Since(began)
	stopSampling()
	if f := os.Getenv("BADGERQ_STEADY_HEAPPROFILE"); f != "" {
		// The live heap at the end, before the DB closes.
		runtime.GC()
		if w, err := os.Create(f); err == nil {
			_ = pprof.WriteHeapProfile(w)
			w.Close()
		}
	}
	at := func(frac float64) steadySample {
		for _, s := range samples {
			if float64(s.written) >= frac*float64(steadyBytes) {
				return s
			}
		}
		return samples[len(samples)-1]
	}
	var peak steadySample
	for _, s := range samples {
		peak.anon, peak.file, peak.heap, peak.dsk = max(peak.anon, s.anon), max(peak.file, s.file), max(peak.heap, s.heap), max(peak.dsk, s.dsk)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(float64(steadyBytes)/(1<<30), "written_GiB")
	b.ReportMetric(float64(steadyBytes)/elapsed.Seconds()/1e6, "MB/s")
	for _, f := range []float64{0.25, 0.5, 1} {
		s := at(f)
		b.ReportMetric(mib(s.anon), fmt.Sprintf("anon_%.0f%%_MiB", f*100))
		b.ReportMetric(mib(s.file), fmt.Sprintf("file_%.0f%%_MiB", f*100))
	}
	b.ReportMetric(mib(peak.anon), "anon_max_MiB")
	b.ReportMetric(mib(peak.file), "file_max_MiB")
	b.ReportMetric(mib(peak.heap), "heap_max_MiB")
	b.ReportMetric(mib(peak.dsk), "disk_max_MiB")
	if testing.Verbose() {
		for _, s := range samples {
			b.Logf("%6.1fs written %6.0f MiB anon %5.0f file %5.0f heap %5.0f disk %5.0f MiB", s.at.Seconds(), mib(s.written), mib(s.anon), mib(s.file), mib(s.heap), mib(s.dsk))
		}
	}
}

// currentRSSParts is RssAnon and RssFile from /proc/self/status, in bytes.
func currentRSSParts() (anon, file int64) {
	v := procStatus("RssAnon:", "RssFile:")
	return v[0], v[1]
}
