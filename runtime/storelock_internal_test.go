package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A second open of a store in use is refused before it checks or repairs
// anything: the running store may be creating a log file, empty for an
// instant, which the repair would take for a crash's leftover and delete
// under it. (The check locked dir/LOCK, which Badger does not lock — it
// flocks the directory — so it excluded nothing and the repair ran.)
func TestStoreInUseIsNotRepaired(t *testing.T) {
	dir := t.TempDir()
	running, err := openStore(dir, storeOptions{minFreeDisk: -1})
	if err != nil {
		t.Fatal(err)
	}
	creating := filepath.Join(dir, "00099.mem") // as the running store makes one
	if err := os.WriteFile(creating, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(dir, storeOptions{minFreeDisk: -1}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	if _, err := os.Stat(creating); err != nil {
		t.Fatalf("the running store's new log file was removed by the refused open: %v", err)
	}
	if err := running.close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(creating, 0); err != nil { // what a kill -9 leaves
		t.Fatal(err)
	}
	again, err := openStore(dir, storeOptions{minFreeDisk: -1})
	if err != nil {
		t.Fatalf("open after the store closed, an empty log file left: %v", err)
	}
	defer again.close()
	if _, err := os.Stat(creating); !os.IsNotExist(err) {
		t.Fatalf("the empty log file was not repaired: %v", err)
	}
}
