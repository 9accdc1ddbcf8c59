package tx

import (
	"errors"
	"testing"
)

// A nil log of a concrete type (an OpenFileLog or NewBadgerLog whose error
// was dropped) is refused at Open with ErrMisuse: it is not the nil Log that
// keeps everything in memory, and Open's Recover on it panicked. A nil DB is
// refused with ErrMisuse too (a plain error before).
func TestNilLogRefused(t *testing.T) {
	for _, l := range []Log{(*FileLog)(nil), (*BadgerLog)(nil)} {
		err := errOrPanic(func() error {
			c, err := Open(Options{Log: l, ExpiryInterval: -1})
			if err == nil {
				c.Close()
			}
			return err
		})
		if !errors.Is(err, ErrMisuse) {
			t.Errorf("Open with a nil %T = %v, want ErrMisuse", l, err)
		}
	}
	if _, err := NewBadgerLog(nil, BadgerLogOptions{}); !errors.Is(err, ErrMisuse) {
		t.Errorf("NewBadgerLog(nil) = %v, want ErrMisuse", err)
	}
}
