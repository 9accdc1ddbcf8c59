package badgerutil

import (
	"os"
	"path/filepath"
)

// RemoveEmptyLogFiles deletes zero-length value-log (*.vlog) and memtable
// write-ahead-log (*.mem) files from a Badger directory. A kill -9 between
// Badger creating such a file and sizing it leaves it empty, and Badger v4
// then refuses to open the directory ("Open existing file ... Create a new
// file"). An empty file holds no data, so removing it loses nothing. Call it
// before badger.Open.
func RemoveEmptyLogFiles(dir string) error {
	for _, pattern := range []string{"*.vlog", "*.mem"} {
		matches, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil {
				return err
			}
			if fi.Size() == 0 {
				if err := os.Remove(m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
