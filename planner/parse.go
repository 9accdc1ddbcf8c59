package planner

import (
	"os"

	"gopkg.in/yaml.v3"
)

// ParseFile reads the app file at path and plans it. Errors in the file are
// reported as an ErrorList whose positions name path; failing to read the
// file is reported as the os error.
func ParseFile(path string, opts Options) (*Plan, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, src, opts)
}

// Parse plans the app described by src. name is used as the file name in
// error positions. On failure the error is an ErrorList holding every
// problem found, and the Plan is nil: a Plan exists only if it is valid.
func Parse(name string, src []byte, opts Options) (*Plan, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	errs := &errorSink{}
	d := &decoder{file: name, errs: errs, aliasBudget: maxAliasExpansion, broken: map[*yaml.Node]bool{}}
	root := d.readYAML(src)
	if root == nil {
		return nil, errs.err()
	}
	budget := maxInterpolated
	interpolateTree(root, lookup, name, errs, d.broken, &budget)
	spec := d.decodeApp(root)
	g := validate(spec, opts.Types, errs)
	if !errs.empty() {
		return nil, errs.err()
	}
	return buildPlan(spec, g), nil
}

// maxAliasExpansion caps how many config values YAML aliases may expand to,
// so that a "billion laughs" file fails fast instead of exhausting memory.
const maxAliasExpansion = 100_000

// maxInterpolated caps the bytes ${VAR} substitutions may write in a file
// (values and defaults), so that a large variable referenced many times
// fails fast instead of exhausting memory.
const maxInterpolated = 8 << 20
