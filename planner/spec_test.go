package planner

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The complete example in specs/app-yaml.md must plan, and its plan must
// match the excerpt the spec shows, so the spec cannot drift from the code.
func TestSpecExample(t *testing.T) {
	md, err := os.ReadFile("../specs/app-yaml.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## A complete example\n\n```yaml\n(.*?)```.*?```\n(.*?)```").FindSubmatch(md)
	if m == nil {
		t.Fatal("no example and plan excerpt in specs/app-yaml.md")
	}
	plan, err := Parse("app-yaml.md", m[1], Options{LookupEnv: func(string) (string, bool) { return "", false }, Types: testTypes})
	if err != nil {
		t.Fatalf("the spec's example does not plan:\n%v", err)
	}
	text := plan.Text()
	for _, line := range strings.Split(strings.TrimSpace(string(m[2])), "\n") {
		if strings.TrimSpace(line) != "..." && !strings.Contains(text, strings.TrimRight(line, " ")+"\n") {
			t.Errorf("the spec shows %q, which is not in the plan:\n%s", line, text)
		}
	}
}
