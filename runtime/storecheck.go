package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
	"google.golang.org/protobuf/proto"
)

// Checks of a store directory before Badger opens it. Badger repairs what it
// can of a damaged store on open, silently: without a MANIFEST it starts an
// empty store and deletes the tables it finds (events lost and sources
// replayed, exit 0); a table whose footer was cut short panics inside a
// goroutine of its open (a crash no recover can catch). Both are refused
// here, with the file named, before anything is changed.

// ErrDamagedStore: the store directory is not in a state Badger can open
// without losing data.
var ErrDamagedStore = errors.New("damaged store")

// StoreExists reports whether dir holds a store (its MANIFEST).
func StoreExists(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, "MANIFEST"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// checkStoreDir checks dir before it is opened. A directory without any of
// Badger's files is a new store, unless existing says it must be one (the
// read commands: they must not create a store where there is none).
func checkStoreDir(dir string, existing bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) && !existing {
			return nil
		}
		return err
	}
	manifest, other, foreign := false, "", ""
	var tables []string
	for _, e := range entries {
		switch name := e.Name(); {
		case name == "MANIFEST":
			manifest = true
		case strings.HasSuffix(name, ".sst"):
			tables = append(tables, name)
			other = name
		case strings.HasSuffix(name, ".vlog"), strings.HasSuffix(name, ".mem"):
			other = name
		case name == "KEYREGISTRY", name == "LOCK", name == "DISCARD", name == "http.json", name == "plugins":
		default:
			foreign = name
		}
	}
	if !manifest {
		if other != "" {
			return fmt.Errorf("%w: %s holds Badger's files (%s, …) but no MANIFEST, the list of its tables: opening it would start an empty store over them and delete them. Nothing was changed: restore the MANIFEST, or move the directory aside", ErrDamagedStore, dir, other)
		}
		// An empty directory (or one an app was killed in before Badger
		// wrote its MANIFEST) becomes a store; one holding other files is
		// not turned into one by a read command.
		if existing && foreign != "" {
			return fmt.Errorf("%s is not a flowrun store (no MANIFEST, and it holds %s; has the app run there? use --data)", dir, foreign)
		}
		return nil
	}
	listed, err := manifestTables(dir)
	if err != nil {
		return nil // Badger reports a MANIFEST it cannot read
	}
	for _, t := range tables {
		// A table the MANIFEST does not list is a flush or compaction that a
		// crash cut short: Badger deletes it, whatever it holds.
		if id, ok := table.ParseFileID(t); !ok || !listed[id] {
			continue
		}
		// Gone since the listing: a running app's compaction deleted it
		// (Badger's lock then refuses the open).
		if err := checkTableFooter(filepath.Join(dir, t)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: table %s: %v. Nothing was changed: restore the store from a backup, or move the directory aside", ErrDamagedStore, filepath.Join(dir, t), err)
		}
	}
	return nil
}

// manifestTables lists the tables dir's MANIFEST refers to (read only).
func manifestTables(dir string) (map[uint64]bool, error) {
	f, err := os.Open(filepath.Join(dir, "MANIFEST"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, _, err := badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]bool, len(m.Tables))
	for id := range m.Tables {
		out[id] = true
	}
	return out, nil
}

// checkTableFooter reads a table's footer the way Badger's table.initIndex
// does — checksum length, checksum, index length, index — with every length
// checked against the file's size, and verifies the index's checksum.
// Badger reads them unchecked (a slice out of range panics).
func checkTableFooter(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	u32 := func(at int64) (int64, error) {
		var b [4]byte
		if at < 0 || at+4 > size {
			return 0, io.ErrUnexpectedEOF
		}
		if _, err := f.ReadAt(b[:], at); err != nil {
			return 0, err
		}
		return int64(binary.BigEndian.Uint32(b[:])), nil
	}
	read := func(at, n int64) ([]byte, error) {
		if at < 0 || n < 0 || at+n > size {
			return nil, io.ErrUnexpectedEOF
		}
		b := make([]byte, n)
		_, err := f.ReadAt(b, at)
		return b, err
	}
	pos := size - 4
	chkLen, err := u32(pos)
	if err != nil {
		return fmt.Errorf("footer: %w (the file is %d bytes)", err, size)
	}
	pos -= chkLen
	buf, err := read(pos, chkLen)
	if err != nil {
		return fmt.Errorf("checksum of %d bytes: %w (the file is %d bytes)", chkLen, err, size)
	}
	var chk pb.Checksum
	if err := proto.Unmarshal(buf, &chk); err != nil {
		return fmt.Errorf("checksum: %w", err)
	}
	pos -= 4
	indexLen, err := u32(pos)
	if err != nil {
		return fmt.Errorf("index length: %w", err)
	}
	index, err := read(pos-indexLen, indexLen)
	if err != nil {
		return fmt.Errorf("index of %d bytes: %w (the file is %d bytes)", indexLen, err, size)
	}
	if err := y.VerifyChecksum(index, &chk); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// badgerLog passes Badger's warnings and errors to the app's log (its info
// and debug messages are routine), and the one debug message that says it
// deleted data: a table the MANIFEST does not list (after a crash, a table
// whose flush was not recorded yet — harmless; otherwise a MANIFEST that
// lost its tail).
type badgerLog struct{ log *slog.Logger }

func (l badgerLog) Errorf(f string, a ...any) {
	l.log.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (l badgerLog) Warningf(f string, a ...any) {
	l.log.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (l badgerLog) Infof(string, ...any) {}

func (l badgerLog) Debugf(f string, a ...any) {
	if strings.HasPrefix(f, "Table file %d not referenced in MANIFEST") {
		l.log.Warn("badger deleted a table its MANIFEST does not list (harmless after a crash during a flush; after damage to the MANIFEST, data is lost)", "table", fmt.Sprint(a...))
	}
}
