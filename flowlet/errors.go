package flowlet

import "errors"

// Permanent marks err as permanent: the event that caused it fails the same
// way every time (a malformed record, say), so retrying it cannot help. The
// runtime moves such an event to the flowlet's dead-letter queue at once,
// without the retries of its `retries:` policy; in a batch, the other events
// are processed one by one and commit as usual. Permanent(nil) is nil.
//
// Any error with a method Permanent() bool that returns true counts as
// permanent too (errors.As finds it in a wrapped chain), so an error type
// may say it by itself.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, is permanent
// (Permanent, or a Permanent() bool method that returns true).
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }
