package tx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// badgerSyncer makes everything a Badger DB has written durable, for the
// BadgerLog's group commit.
//
// DB.Sync is not enough: it syncs only the *current* memtable WAL (.mem) and
// value-log file (.vlog), and with SyncWrites off Badger does not sync a file
// when it rotates away from it. A commit that lands just before a rotation and
// whose group sync runs just after it would then sit in an unsynced file: safe
// from kill -9 (the page cache keeps it), lost on power failure — and a value
// log entry lost under a synced table is a dangling pointer.
//
// So the syncer lists the DB's .mem and .vlog files and fdatasyncs every one
// it has not yet synced since Badger stopped writing it: the current ones,
// and those rotated away from since the last sync. A file that is not the
// newest of its kind when listed is no longer written, so once synced it is
// done.
//
// Value logs first, then WALs, each kind in parallel: a WAL entry of a
// large value points into the value log, and Badger replays the WAL without
// checking that the value exists. Synced at once (or WAL first, as DB.Sync
// does), a power loss in the middle of a sync could keep WAL entries whose
// values were lost. The order covers what was written before the sync
// started; with SyncHooks' gate, no WAL entry written during the sync can
// get ahead of its value either.
type badgerSyncer struct {
	dirs []string
	mu   sync.Mutex
	done map[string]bool     // rotated-away files synced since their last write
	open map[string]*os.File // kept open while they exist
	// current is the newest file of each kind at the last listing. The
	// listing (one read of a directory that may hold thousands of tables) is
	// skipped while nothing was created or deleted in the DB's directories
	// since: their modification times are those seen at the listing (stamps).
	// Checking that the file after the current one does not exist is not
	// enough: two rotations and a flush that deleted the files in between
	// leave no such file but a newer current one.
	current  map[string]logFile
	stamps   map[string]dirStamp // per directory, at the last listing
	listings int                 // directory listings so far
	// synced, when set (tests), sees the files of each sync.
	synced func(paths []string)
	// syncFile makes one file durable: fdatasync (tests record the order).
	syncFile func(*os.File) error
}

func newBadgerSyncer(db *badger.DB) *badgerSyncer {
	return newDirSyncer(badgerDirs(db.Opts()))
}

// badgerDirs are the directories of a DB's log files.
func badgerDirs(o badger.Options) []string {
	dirs := []string{filepath.Clean(o.Dir)}
	if o.ValueDir != "" && filepath.Clean(o.ValueDir) != dirs[0] {
		dirs = append(dirs, filepath.Clean(o.ValueDir))
	}
	return dirs
}

func newDirSyncer(dirs []string) *badgerSyncer {
	return &badgerSyncer{dirs: dirs, done: map[string]bool{}, open: map[string]*os.File{}, current: map[string]logFile{}, stamps: map[string]dirStamp{}, syncFile: fdatasync}
}

// dirStamp is a directory's modification time when it was listed. trusted:
// it was older than mtimeSlack then. File systems stamp with a coarse clock
// (a few milliseconds), so a change made in the same tick as the stamped one
// may leave the time unchanged; a stamp older than the slack cannot be
// repeated by a later change.
type dirStamp struct {
	mtime   time.Time
	trusted bool
}

const mtimeSlack = 20 * time.Millisecond

type logFile struct {
	path string
	kind string // ".mem" or ".vlog"
	fid  int
}

// sync makes every write that returned before it started durable.
func (s *badgerSyncer) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unrotated() {
		todo := make([]*os.File, 0, len(s.current))
		for _, f := range s.current {
			h, err := s.handle(f.path)
			if errors.Is(err, fs.ErrNotExist) {
				return s.syncListed() // gone already: list again
			}
			if err != nil {
				return err
			}
			todo = append(todo, h)
		}
		return s.fdatasync(todo)
	}
	return s.syncListed()
}

// syncAtRotation is sync for the moment Badger leaves its memtable (see
// SyncHooks), which runs on Badger's writer under its DB lock, so it
// avoids listing the directories (which may hold thousands of tables):
// the WAL being left is the one Badger made at the previous rotation, the
// file after the last one synced, and the value log moves on to the next
// file only when that exists. When a guess fails (the first rotation, a
// DropAll) it lists.
func (s *badgerSyncer) syncAtRotation() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, okMem := s.current[".mem"]
	vlog, okVlog := s.current[".vlog"]
	if !okMem || !okVlog {
		return s.syncListed()
	}
	leaving := mem.next()
	if _, err := os.Stat(leaving.path); err != nil {
		return s.syncListed()
	}
	files := []logFile{vlog} // the value-log file written so far, then any after it
	for {
		n := files[len(files)-1].next()
		if _, err := os.Stat(n.path); err != nil {
			break
		}
		files = append(files, n)
	}
	files = append(files, leaving)
	todo := make([]*os.File, 0, len(files))
	for _, f := range files {
		h, err := s.handle(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			return s.syncListed()
		}
		if err != nil {
			return err
		}
		todo = append(todo, h)
	}
	if err := s.fdatasync(todo); err != nil {
		return err
	}
	// Badger writes neither the old WAL nor the old value logs again.
	for _, f := range append(files[:len(files)-2:len(files)-2], mem) {
		if h := s.open[f.path]; h != nil {
			h.Close()
			delete(s.open, f.path)
		}
	}
	s.current[".mem"], s.current[".vlog"] = leaving, files[len(files)-2]
	return nil
}

// next is the file Badger creates after f (same kind, next id).
func (f logFile) next() logFile {
	digits := len(strings.TrimSuffix(filepath.Base(f.path), f.kind))
	name := fmt.Sprintf("%0*d%s", digits, f.fid+1, f.kind)
	return logFile{path: filepath.Join(filepath.Dir(f.path), name), kind: f.kind, fid: f.fid + 1}
}

// unrotated reports whether no file was created or deleted in the DB's
// directories since the last listing (see current).
func (s *badgerSyncer) unrotated() bool {
	if len(s.current) == 0 {
		return false
	}
	for _, dir := range s.dirs {
		st, ok := s.stamps[dir]
		if !ok || !st.trusted {
			return false
		}
		fi, err := os.Stat(dir)
		if err != nil || !fi.ModTime().Equal(st.mtime) {
			return false
		}
	}
	return true
}

// syncListed lists the log files and syncs every one not done.
func (s *badgerSyncer) syncListed() error {
	s.listings++
	var files []logFile
	newest := map[string]int{}
	stamps := map[string]dirStamp{}
	for _, dir := range s.dirs {
		// Stamped before reading: a change during the read shows as a
		// newer time at the next sync, which then lists again.
		now := time.Now()
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		stamps[dir] = dirStamp{mtime: fi.ModTime(), trusted: fi.ModTime().Before(now.Add(-mtimeSlack))}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			kind := filepath.Ext(name)
			if kind != ".mem" && kind != ".vlog" {
				continue
			}
			fid, err := strconv.Atoi(strings.TrimSuffix(name, kind))
			if err != nil {
				continue
			}
			files = append(files, logFile{path: filepath.Join(dir, name), kind: kind, fid: fid})
			newest[kind] = max(newest[kind], fid)
		}
	}
	present := make(map[string]bool, len(files))
	var todo []*os.File
	var finished []string
	current := map[string]logFile{}
	for _, f := range files {
		present[f.path] = true
		if f.fid == newest[f.kind] {
			current[f.kind] = f
		}
		if s.done[f.path] {
			continue
		}
		h, err := s.handle(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // flushed to a table (synced by Badger) or collected
		}
		if err != nil {
			return err
		}
		todo = append(todo, h)
		if f.fid < newest[f.kind] {
			finished = append(finished, f.path)
		}
	}
	// Forget files that are gone.
	for p, h := range s.open {
		if !present[p] {
			h.Close()
			delete(s.open, p)
		}
	}
	for p := range s.done {
		if !present[p] {
			delete(s.done, p)
		}
	}
	if err := s.fdatasync(todo); err != nil {
		return err
	}
	s.current = current // only once every listed file is synced
	s.stamps = stamps
	for _, p := range finished {
		s.done[p] = true
		if h := s.open[p]; h != nil {
			h.Close()
			delete(s.open, p)
		}
	}
	return nil
}

// fdatasync syncs the value-log files, then the WALs (see badgerSyncer),
// each kind in parallel, and tells the test hook which.
func (s *badgerSyncer) fdatasync(files []*os.File) error {
	if s.synced != nil {
		paths := make([]string, len(files))
		for i, h := range files {
			paths[i] = h.Name()
		}
		s.synced(paths)
	}
	vlogs := make([]*os.File, 0, len(files))
	wals := make([]*os.File, 0, len(files))
	for _, h := range files {
		if filepath.Ext(h.Name()) == ".vlog" {
			vlogs = append(vlogs, h)
		} else {
			wals = append(wals, h)
		}
	}
	if err := syncAll(vlogs, s.syncFile); err != nil {
		return err
	}
	return syncAll(wals, s.syncFile)
}

func (s *badgerSyncer) handle(path string) (*os.File, error) {
	if h := s.open[path]; h != nil {
		return h, nil
	}
	h, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.open[path] = h
	return h, nil
}

// syncAll syncs the files in parallel.
func syncAll(files []*os.File, syncFile func(*os.File) error) error {
	switch len(files) {
	case 0:
		return nil
	case 1:
		return syncFile(files[0])
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = syncFile(f)
		}()
	}
	errs[0] = syncFile(files[0])
	wg.Wait()
	return errors.Join(errs...)
}

func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// close releases the kept file handles.
func (s *badgerSyncer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, h := range s.open {
		h.Close()
		delete(s.open, p)
	}
}

// BadgerSyncer syncs a Badger DB's write-ahead and value-log files as
// SyncBadger does, remembering what it synced: it lists the DB's directory
// again only after Badger rotated to a new file. For repeated syncs (a
// writeback loop). Safe for concurrent use.
type BadgerSyncer struct{ s *badgerSyncer }

// NewBadgerSyncer returns a syncer for db (a no-op for an in-memory DB).
func NewBadgerSyncer(db *badger.DB) *BadgerSyncer {
	if db.Opts().InMemory {
		return &BadgerSyncer{}
	}
	return &BadgerSyncer{s: newBadgerSyncer(db)}
}

// Sync makes every write to the DB that returned before the call durable.
func (s *BadgerSyncer) Sync() error {
	if s.s == nil {
		return nil
	}
	return s.s.sync()
}

// Close releases the file handles the syncer keeps.
func (s *BadgerSyncer) Close() {
	if s.s != nil {
		s.s.close()
	}
}

// SyncBadger makes every write to db that returned before the call durable:
// it fdatasyncs all of the DB's write-ahead and value-log files, rotated ones
// included, which DB.Sync does not (see badgerSyncer). For occasional syncs
// outside a BadgerLog; the log's group commit keeps track of what it already
// synced instead.
func SyncBadger(db *badger.DB) error {
	if db.Opts().InMemory {
		return nil
	}
	s := newBadgerSyncer(db)
	defer s.close()
	return hooksOf(db).gatedSync(s.sync)
}
