package queue

import (
	"errors"
	"sync"
	"testing"
)

// fakeBackend keeps queue configs in a map; Info can be held between
// reading the config and returning it.
type fakeBackend struct {
	Backend // the rest is unused: calling it panics

	mu   sync.Mutex
	cfgs map[string]Config
	hold func() // called by Info after it read the config, if set
}

func (f *fakeBackend) CreateQueue(name string, cfg Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cfgs[name]; ok {
		return ErrExists
	}
	f.cfgs[name] = cfg
	return nil
}

func (f *fakeBackend) DeleteQueue(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cfgs[name]; !ok {
		return ErrUnknownQueue
	}
	delete(f.cfgs, name)
	return nil
}

func (f *fakeBackend) Info(name string) (QueueInfo, error) {
	f.mu.Lock()
	cfg, ok := f.cfgs[name]
	hold := f.hold
	f.mu.Unlock()
	if !ok {
		return QueueInfo{}, ErrUnknownQueue
	}
	if hold != nil {
		hold()
	}
	return QueueInfo{Name: name, Config: cfg}, nil
}

func (f *fakeBackend) Scan(string, ScanOptions, func(Entry) bool) error { return nil }

// A lookup that read a queue's config from the backend just before
// DeleteQueue, and cached it just after the queue was created again with
// another config, kept the old config for good: Scan (and Producer's size
// check, AddGroup, Rescale) judged the new queue by it.
func TestConfigCacheDeleteRecreate(t *testing.T) {
	f := &fakeBackend{cfgs: map[string]Config{}}
	qs := New(f)
	if err := qs.CreateQueue("q", Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	f.hold = func() { close(entered); <-release }
	done := make(chan error, 1)
	go func() { done <- qs.Scan("q", ScanOptions{}, func(Entry) bool { return true }) }()
	<-entered // the lookup has the old config in hand
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	if err := qs.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	if err := qs.CreateQueue("q", Config{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := qs.Scan("q", ScanOptions{Partitions: []int{3}}, func(Entry) bool { return true }); err != nil {
		if errors.Is(err, ErrBadConfig) {
			t.Fatalf("the re-created queue is judged by the deleted one's config: %v", err)
		}
		t.Fatal(err)
	}
}
