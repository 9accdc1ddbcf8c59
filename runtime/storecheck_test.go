package runtime_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

// A store Badger would open by deleting data, or by panicking, is refused
// with the file named, and nothing in it is changed; the read commands do not
// create a store where there is none.
func TestDamagedStoreRefused(t *testing.T) {
	app := `app: damaged
flowlets:
  gen: {type: generator, config: {count: 500}}
  c: {type: t_count}
connections:
  - {from: gen, to: c}
`
	// fresh makes a store that ran, copied to a directory of its own.
	fresh := func(t *testing.T) (dir, data string) {
		dir = t.TempDir()
		runDrain(t, dir, app, runtime.Options{NoSync: true}).Close()
		return dir, filepath.Join(dir, "data")
	}
	files := func(data, suffix string) []string {
		m, _ := filepath.Glob(filepath.Join(data, "*"+suffix))
		return m
	}
	open := func(dir string) error {
		a, err := runtime.Open(plan(t, dir, app), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
		if err == nil {
			a.Close()
		}
		return err
	}

	t.Run("no MANIFEST", func(t *testing.T) {
		dir, data := fresh(t)
		tables := files(data, ".sst")
		if len(tables) == 0 {
			t.Fatal("the store has no table to lose: the test shows nothing")
		}
		if err := os.Remove(filepath.Join(data, "MANIFEST")); err != nil {
			t.Fatal(err)
		}
		err := open(dir)
		if !errors.Is(err, runtime.ErrDamagedStore) || !strings.Contains(err.Error(), "but no MANIFEST") {
			t.Fatalf("open without a MANIFEST: %v", err)
		}
		if _, err := runtime.OpenStore(data); !errors.Is(err, runtime.ErrDamagedStore) {
			t.Fatalf("read command without a MANIFEST: %v", err)
		}
		for _, f := range tables {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("a refused open changed the store: %v", err)
			}
		}
	})

	t.Run("table cut short", func(t *testing.T) {
		dir, data := fresh(t)
		table := files(data, ".sst")[0]
		st, _ := os.Stat(table)
		if err := os.Truncate(table, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		err := open(dir)
		if !errors.Is(err, runtime.ErrDamagedStore) || !strings.Contains(err.Error(), "table "+table) {
			t.Fatalf("open with a table cut short: %v", err)
		}
	})

	t.Run("index damaged", func(t *testing.T) {
		dir, data := fresh(t)
		table := files(data, ".sst")[0]
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		// The index sits before the footer's checksum: flip a byte just
		// before the last 64 bytes.
		b[len(b)-64] ^= 0xff
		if err := os.WriteFile(table, b, 0o644); err != nil {
			t.Fatal(err)
		}
		err = open(dir)
		if !errors.Is(err, runtime.ErrDamagedStore) || !strings.Contains(err.Error(), table) {
			t.Fatalf("open with a damaged index: %v", err)
		}
	})

	// A crash during a flush or compaction leaves a partial table the
	// MANIFEST does not list yet: Badger deletes it, the open goes on.
	t.Run("unlisted partial table", func(t *testing.T) {
		dir, data := fresh(t)
		orphan := filepath.Join(data, "009999.sst")
		if err := os.WriteFile(orphan, []byte("half a table"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := open(dir); err != nil {
			t.Fatalf("open with a partial table from a crash: %v", err)
		}
		if _, err := os.Stat(orphan); !os.IsNotExist(err) {
			t.Errorf("the partial table is still there: %v", err)
		}
	})

	t.Run("not a store", func(t *testing.T) {
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := runtime.OpenStore(other)
		if err == nil || !strings.Contains(err.Error(), "is not a flowrun store (no MANIFEST, and it holds notes.txt") {
			t.Fatalf("read command on a directory of other files: %v", err)
		}
		if left, _ := os.ReadDir(other); len(left) != 1 {
			t.Errorf("a read command created %d files in a directory that held no store", len(left)-1)
		}
		// An empty one (an app killed before Badger wrote anything) opens.
		s, err := runtime.OpenStore(t.TempDir())
		if err != nil {
			t.Fatalf("read command on an empty directory: %v", err)
		}
		s.Close()
	})
}
