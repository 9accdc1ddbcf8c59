package crashtest

import (
	"bytes"
	"os"
)

// CutTornLine drops a torn last line of the acknowledgement file at path: a
// child killed inside its write (SIGKILL can stop a write between pages)
// leaves part of a line, which the next child's first line would extend
// into an id nobody wrote. A torn line was never a whole acknowledgement.
// Call it before a child appends and before the final check reads.
func CutTornLine(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil || len(b) == 0 || b[len(b)-1] == '\n' {
		return err
	}
	return os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1))
}
