package pluginhost

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Trimming the build cache, the way Go trims its own: every source edit of a
// plugin makes a new entry (a whole binary, tens of MiB), so a developer
// iterating on a plugin would otherwise fill the disk. An entry is a
// directory named by its key; its last use is the newest modification time
// of a file in it. Build refreshes the binary's time on a hit and every
// plugin process start refreshes it too (at most once per usedRefresh, to
// keep hits free of writes), and at most once per trimEvery a Build removes
// the entries not used for Options.CacheMaxAge.
//
// A running host does not depend on its entry staying: Open hard-links the
// binary into the host's own temporary directory and starts its processes
// from there, so a restart after another app trimmed the entry still finds
// the binary. Where the cache is on another file system the link fails and
// the host keeps its entry's time fresh while it is open (keepFresh), so no
// trim takes it.

const (
	// DefaultCacheMaxAge is how long an unused built plugin stays (Go's
	// build cache keeps unused entries five days too).
	DefaultCacheMaxAge = 5 * 24 * time.Hour
	trimEvery          = 24 * time.Hour
	usedRefresh        = time.Hour
	trimStamp          = "trim.txt"
	keyDirLen          = 32 // hex digits of a key directory's name
)

// markUsed records that bin was used now, unless it was within usedRefresh.
func markUsed(bin string, now time.Time) {
	if st, err := os.Stat(bin); err == nil && now.Sub(st.ModTime()) >= usedRefresh {
		_ = os.Chtimes(bin, now, now)
	}
}

// trimCache removes the entries of cache dir not used for maxAge, except
// keep, if no trim ran there for trimEvery. It is best effort: a file it
// cannot read or remove stays. Only directories named like a key are
// touched, whatever else a user keeps in the directory.
func trimCache(dir, keep string, maxAge time.Duration, now time.Time, log *slog.Logger) {
	if maxAge < 0 {
		return
	}
	stamp := filepath.Join(dir, trimStamp)
	if st, err := os.Stat(stamp); err == nil && now.Sub(st.ModTime()) < trimEvery {
		return
	}
	// The stamp first: hosts starting together then trim once.
	if err := os.WriteFile(stamp, []byte(now.UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return
	}
	_ = os.Chtimes(stamp, now, now)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	removed := 0
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if !e.IsDir() || !isKeyDir(e.Name()) || path == keep {
			continue
		}
		if last, ok := lastUse(path); ok && now.Sub(last) > maxAge {
			if os.RemoveAll(path) == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		log.Info("plugin cache trimmed", "cache", dir, "removed", removed, "unused_for", maxAge)
	}
}

// lastUse is the newest modification time of a file under an entry (its
// binary, or the temporary file of a build still running); ok is false when
// the entry could not be read whole.
func lastUse(entry string) (last time.Time, ok bool) {
	err := filepath.WalkDir(entry, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(last) {
			last = info.ModTime()
		}
		return nil
	})
	return last, err == nil
}

func isKeyDir(name string) bool {
	if len(name) != keyDirLen {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// keepFresh marks bin used every interval until stop is closed.
func keepFresh(bin string, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			markUsed(bin, now)
		}
	}
}
