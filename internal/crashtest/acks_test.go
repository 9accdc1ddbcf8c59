package crashtest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCutTornLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "acks")
	if err := CutTornLine(path); err != nil {
		t.Fatalf("no file yet: %v", err)
	}
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"a\nb\n", "a\nb\n"},
		{"a\nb\nr17-36", "a\nb\n"},
		{"r17-36", ""},
	} {
		if err := os.WriteFile(path, []byte(c.in), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CutTornLine(path); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != c.want {
			t.Errorf("%q → %q, want %q", c.in, got, c.want)
		}
	}
}
