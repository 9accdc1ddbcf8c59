package badgerq

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// BenchmarkSingleHop: a producer enqueues batches in transactions while 1 or
// 2 consumer instances dequeue + ack in theirs (fast path, BadgerLog), then
// raw Badger WriteBatch writes the same events, one entry per event, on a
// fresh DB with the same options. Metrics: events/s, MB/s, raw_MB/s, the
// ratio, p99 enqueue-to-dequeue latency, and the process's peak RSS.
//
//	go test ./queue/badgerq -run '^$' -bench SingleHop -benchtime 200000x
func BenchmarkSingleHop(b *testing.B) {
	for _, durable := range []bool{false, true} {
		for _, size := range []int{100, 1024} {
			for _, batch := range []int{1, 100, 500} {
				for _, inst := range []int{1, 2} {
					name := fmt.Sprintf("durable=%v/size=%d/batch=%d/instances=%d", durable, size, batch, inst)
					b.Run(name, func(b *testing.B) { benchHop(b, durable, size, batch, inst) })
				}
			}
		}
	}
}

func benchHop(b *testing.B, durable bool, size, batch, instances int) {
	dir := b.TempDir()
	db, err := OpenDB(dir, durable)
	if err != nil {
		b.Fatal(err)
	}
	bl, _ := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: durable})
	coord, err := tx.Open(tx.Options{Log: bl})
	if err != nil {
		b.Fatal(err)
	}
	be, err := Open(db, Options{Coordinator: coord, FastPath: true, Sync: durable})
	if err != nil {
		b.Fatal(err)
	}
	qs := queue.New(be)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(qs.CreateQueue("q", queue.Config{}))
	must(qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.RoundRobin, Instances: instances}))
	total := b.N
	payload := make([]byte, size)
	var consumed atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range instances {
		c, err := qs.Consumer("q", "g", i)
		must(err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for consumed.Load() < int64(total) {
				var got []queue.Entry
				err := queuetest.Step(coord, func() (err error) { got, err = c.Dequeue(max(batch, 100)); return err }, c)
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					time.Sleep(100 * time.Microsecond)
					continue
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
	p, err := qs.Producer("q")
	must(err)
	for i := 0; i < total; i += batch {
		must(queuetest.Step(coord, func() error {
			now := uint64(time.Now().UnixNano())
			for range min(batch, total-i) {
				binary.LittleEndian.PutUint64(payload, now)
				if err := p.Enqueue(context.Background(), queue.Event{Payload: payload}); err != nil {
					return err
				}
			}
			return nil
		}, p))
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	be.Close()
	coord.Close()
	db.Close()

	rawElapsed := rawBadger(b, durable, size, total)
	mbps := float64(total*size) / elapsed.Seconds() / 1e6
	rawMBps := float64(total*size) / rawElapsed.Seconds() / 1e6
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
	b.ReportMetric(mbps, "MB/s")
	b.ReportMetric(rawMBps, "raw_MB/s")
	b.ReportMetric(mbps/rawMBps, "ratio")
	b.ReportMetric(float64(peakRSS())/(1<<20), "maxRSS_MiB")
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

// peakRSS is VmHWM from /proc/self/status, in bytes.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
