package queue

import "fmt"

// MaxNameLen bounds queue and group names; names appear in keys and metrics.
const MaxNameLen = 128

// CheckName reports whether name is a valid queue or group name: 1 to
// MaxNameLen bytes of [A-Za-z0-9_.-], not starting with '.' or '-'. Anything
// path-like ("a/b", "..", "\\") is refused, so a name can never address
// another queue's data or a file.
func CheckName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", ErrBadName, kind)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s name of %d bytes (max %d)", ErrBadName, kind, len(name), MaxNameLen)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: %s name %q starts with %q", ErrBadName, kind, name, name[0])
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %s name %q contains %q", ErrBadName, kind, name, c)
		}
	}
	return nil
}
