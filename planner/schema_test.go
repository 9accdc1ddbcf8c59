package planner

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestSchemaFields: specs/app-yaml.schema.json, the JSON Schema editors
// check app files with, allows at each level exactly the fields the
// planner knows (it lacked two runtime fields until 0b34c3c, and editors
// flagged valid files). Extension fields ("x-*") are allowed where the
// planner ignores them (the top level) and nowhere else.
func TestSchemaFields(t *testing.T) {
	src, err := os.ReadFile("../specs/app-yaml.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		PatternProperties    map[string]json.RawMessage `json:"patternProperties"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	var schema struct {
		object
		Definitions map[string]object `json:"definitions"`
	}
	if err := json.Unmarshal(src, &schema); err != nil {
		t.Fatal(err)
	}
	sub := func(o object, name string) object {
		var s object
		if err := json.Unmarshal(o.Properties[name], &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return s
	}
	for _, c := range []struct {
		where string
		o     object
		known []string
	}{
		{"the top level", schema.object, appFields},
		{"runtime", sub(schema.object, "runtime"), runtimeFields},
		{"a flowlet", schema.Definitions["flowlet"], flowletFields},
		{"retries", sub(schema.Definitions["flowlet"], "retries"), retryFields},
		{"a connection", schema.Definitions["connection"], connectionFields},
	} {
		var want []string
		for _, f := range c.known {
			if f != extensionFields {
				want = append(want, f)
			}
		}
		var got []string
		for f := range c.o.Properties {
			got = append(got, f)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the schema has properties %v, the planner knows %v", c.where, got, want)
		}
		if c.o.AdditionalProperties == nil || *c.o.AdditionalProperties {
			t.Errorf("%s: the schema allows other properties, the planner does not", c.where)
		}
		var patterns []string
		for p := range c.o.PatternProperties {
			patterns = append(patterns, p)
		}
		if ext := slices.Contains(c.known, extensionFields); ext && !slices.Equal(patterns, []string{"^x-"}) || !ext && len(patterns) > 0 {
			t.Errorf("%s: the schema's pattern properties are %v; the planner takes x-* fields here: %v", c.where, patterns, ext)
		}
	}
}
