package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkStartCommit measures start + CanCommit + Commit with 0 and 10
// change keys, at 1, 16 and 64 goroutines, in memory, with a FileLog that
// writes without fsync (survives kill -9, not power loss) and with a durable
// FileLog (fsync, group commit). It reports tx/s and the commit p99.
//
//	go test -run '^$' -bench StartCommit -benchtime 2s ./tx/
func BenchmarkStartCommit(b *testing.B) {
	for _, mode := range []string{"memory", "file-nosync", "file-fsync"} {
		for _, keys := range []int{0, 10} {
			for _, g := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("%s/keys=%d/g=%d", mode, keys, g), func(b *testing.B) {
					benchStartCommit(b, mode, keys, g, false)
				})
				if keys > 0 {
					b.Run(fmt.Sprintf("%s/keys=%d/onestep/g=%d", mode, keys, g), func(b *testing.B) {
						benchStartCommit(b, mode, keys, g, true)
					})
				}
			}
		}
	}
}

// oneStep uses CommitWith (one durable edit) instead of CanCommit + Commit.
func benchStartCommit(b *testing.B, mode string, nkeys, workers int, oneStep bool) {
	o := Options{ExpiryInterval: -1}
	if mode != "memory" {
		l, err := OpenFileLog(b.TempDir(), FileLogOptions{Sync: mode == "file-fsync"})
		if err != nil {
			b.Fatal(err)
		}
		o.Log = l
	}
	c, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + workers - 1) / workers
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			keys := make([][]byte, nkeys)
			for i := range keys {
				keys[i] = make([]byte, 16)
			}
			for i := 0; i < per; i++ {
				tx, err := c.StartShort(time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				for k := range keys { // distinct keys: measure the machinery, not conflicts
					binary.LittleEndian.PutUint64(keys[k], uint64(w))
					binary.LittleEndian.PutUint64(keys[k][8:], uint64(i*nkeys+k))
				}
				if oneStep {
					if err := c.CommitWith(tx, keys, nil); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				if nkeys > 0 {
					if err := c.CanCommit(tx, keys); err != nil {
						b.Error(err)
						return
					}
				}
				if err := c.Commit(tx); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	n := per * workers
	b.ReportMetric(float64(n)/elapsed.Seconds(), "tx/s")
	b.ReportMetric(float64(c.Stats().CommitLatency.Quantile(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(c.maxConflictKeys), "max-keys")
}

// BenchmarkFastPathCommit measures the single-store fast path: a transaction
// staging one 100-byte write into Badger with its commit record; durable means
// BadgerLog's group sync (DB.Sync shared by concurrent commits).
//
//	go test -run '^$' -bench FastPath -benchtime 2s ./tx/
func BenchmarkFastPathCommit(b *testing.B) {
	for _, durable := range []bool{false, true} {
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("durable=%v/g=%d", durable, g), func(b *testing.B) {
				db := openBadger(b, b.TempDir(), false)
				defer db.Close()
				bl, _ := NewBadgerLog(db, BadgerLogOptions{Sync: durable})
				c, err := Open(Options{Log: bl, ExpiryInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				value := make([]byte, 100)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				per := (b.N + g - 1) / g
				for w := 0; w < g; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						p := &oneWrite{db: db, value: value}
						ctx := c.NewContext(p)
						for i := 0; i < per; i++ {
							if _, err := ctx.Start(time.Minute); err != nil {
								b.Error(err)
								return
							}
							if err := ctx.Finish(); err != nil {
								b.Error(err)
								return
							}
						}
					}(w)
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(per*g)/elapsed.Seconds(), "tx/s")
				b.ReportMetric(float64(c.Stats().CommitLatency.Quantile(0.99).Microseconds()), "p99-µs")
			})
		}
	}
}

// oneWrite stages one value keyed by its write pointer.
type oneWrite struct {
	db    any
	value []byte
	tx    *Tx
}

func (p *oneWrite) StartTx(tx *Tx) error  { p.tx = tx; return nil }
func (p *oneWrite) UpdateTx(tx *Tx) error { p.tx = tx; return nil }
func (p *oneWrite) ChangeKeys() [][]byte  { return nil }
func (p *oneWrite) Persist() error        { return fmt.Errorf("fast path only") }
func (p *oneWrite) PostCommit()           {}
func (p *oneWrite) Rollback() error       { return nil }
func (p *oneWrite) Store() any            { return p.db }
func (p *oneWrite) Stage(dst []Write) ([]Write, error) {
	return append(dst, Write{Key: binary.BigEndian.AppendUint64([]byte("d/"), p.tx.WritePointer), Value: p.value}), nil
}

// BenchmarkFdatasync measures this disk's floor for durable commits: append
// 4 KiB to a file, fdatasync, repeat; it reports the p50 and p99 of one
// fdatasync. Group commit amortizes it over concurrent committers, but a
// sequential committer waits for at least one per commit, and a queue hop
// (producer commit, then consumer commit) for at least two.
//
//	go test -run '^$' -bench Fdatasync -benchtime 2000x ./tx/
func BenchmarkFdatasync(b *testing.B) {
	b.Run("file", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		syncLatency(b, func() error {
			if _, err := f.Write(buf); err != nil {
				return err
			}
			return unix.Fdatasync(int(f.Fd()))
		})
	})
	// The floor of a group sync that must order two files (a value log
	// before its WAL, specs/transactions.md §3): a 4 KiB append to each,
	// then the two fdatasyncs one after the other ("two-in-a-row") or at
	// once ("two-at-once", which that order forbids); and an fdatasync
	// with nothing to write ("clean"), which still flushes the device.
	twoFiles := func(b *testing.B, parallel bool) {
		dir := b.TempDir()
		f, err := os.Create(filepath.Join(dir, "a"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		g, err := os.Create(filepath.Join(dir, "b"))
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		buf := make([]byte, 4096)
		syncLatency(b, func() error {
			if _, err := f.Write(buf); err != nil {
				return err
			}
			if _, err := g.Write(buf); err != nil {
				return err
			}
			if !parallel {
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					return err
				}
				return unix.Fdatasync(int(g.Fd()))
			}
			done := make(chan error, 1)
			go func() { done <- unix.Fdatasync(int(g.Fd())) }()
			return errors.Join(unix.Fdatasync(int(f.Fd())), <-done)
		})
	}
	b.Run("two-in-a-row", func(b *testing.B) { twoFiles(b, false) })
	b.Run("two-at-once", func(b *testing.B) { twoFiles(b, true) })
	b.Run("clean", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			b.Fatal(err)
		}
		syncLatency(b, func() error { return unix.Fdatasync(int(f.Fd())) })
	})
	// A small Badger write, then DB.Sync (memtable WAL, then value log) or
	// the BadgerLog's own sync (every file written since, in parallel).
	for _, mode := range []string{"badger-dbsync", "badger-logsync"} {
		b.Run(mode, func(b *testing.B) {
			db := openBadger(b, b.TempDir(), false)
			defer db.Close()
			syncer := newBadgerSyncer(db)
			defer syncer.close()
			small, big := make([]byte, 100), make([]byte, 4096) // below and above the value threshold
			i := 0
			syncLatency(b, func() error {
				i++
				txn := db.NewTransaction(true)
				defer txn.Discard()
				if err := txn.Set(binary.BigEndian.AppendUint64([]byte("s"), uint64(i)), small); err != nil {
					return err
				}
				if err := txn.Set(binary.BigEndian.AppendUint64([]byte("b"), uint64(i)), big); err != nil {
					return err
				}
				if err := txn.Commit(); err != nil {
					return err
				}
				if mode == "badger-dbsync" {
					return db.Sync()
				}
				return syncer.sync()
			})
		})
	}
}

// syncLatency runs op b.N times and reports the p50, p99 and max of each run.
func syncLatency(b *testing.B, op func() error) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
