package main

import (
	"errors"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/runtime"
)

// runtimeStore reads a stopped app's store through package runtime.
type runtimeStore struct {
	s   *runtime.Store
	app string
}

func (r runtimeStore) ScanCounters(fl, table string, fn func([]byte, int64) error) error {
	return r.s.View(r.app, fl, func(st runtime.StateReader) error {
		it := st.Counters(table).Scan(flowlet.ScanOptions{})
		for it.Next() {
			if err := fn(it.Key(), it.Count()); err != nil {
				it.Close()
				return err
			}
		}
		return errors.Join(it.Err(), it.Close())
	})
}

func (r runtimeStore) ScanTable(fl, table string, fn func([]byte, []byte) error) error {
	return r.s.View(r.app, fl, func(st runtime.StateReader) error {
		it := st.Table(table).Scan(flowlet.ScanOptions{})
		for it.Next() {
			if err := fn(it.Key(), it.Value()); err != nil {
				it.Close()
				return err
			}
		}
		return errors.Join(it.Err(), it.Close())
	})
}

func (r runtimeStore) DLQLen(fl string) (int64, error) {
	n, err := r.s.DLQSize(fl)
	if errors.Is(err, queue.ErrUnknownQueue) {
		return 0, nil // never had a dead letter
	}
	return n, err
}

func (r runtimeStore) DeadLetters(fl string, fn func([]byte) error) error {
	var ferr error
	err := r.s.DeadLetters(fl, 0, func(d runtime.DeadLetter) bool {
		ferr = fn(d.Payload)
		return ferr == nil
	})
	if errors.Is(err, queue.ErrUnknownQueue) {
		return ferr
	}
	return errors.Join(err, ferr)
}
