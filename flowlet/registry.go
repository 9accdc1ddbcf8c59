package flowlet

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
)

// TypeInfo is what a built-in flowlet type declares about itself. Its fields
// mirror planner.TypeInfo, so the runtime can hand them to the planner to
// check connections.
type TypeInfo struct {
	// Outputs are the output names the type emits on. Empty means any.
	Outputs []string
	// Source types produce events without consuming any.
	Source bool
	// Sink types only consume.
	Sink bool
	// SingleInstance types run as one instance (one reader or writer of a
	// file, one listener); the planner refuses `instances` above 1.
	SingleInstance bool
	// Doc is a one-line description for `flowrun` help output.
	Doc string
}

// Type is a registered flowlet type.
type Type struct {
	Name string
	New  func() Flowlet
	Info TypeInfo
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Type{}
	typeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

// Register makes a flowlet type available by name to the `type:` field of
// app YAML files. It is meant for init functions and panics when name is
// invalid or already registered, or factory is nil, as database/sql.Register
// does. It panics too when an output in info is not a valid output name
// (CheckOutputName).
func Register(name string, factory func() Flowlet, info TypeInfo) {
	if !typeNameRE.MatchString(name) {
		panic(fmt.Sprintf("flowlet: Register: invalid type name %q (want [a-z0-9][a-z0-9_-]{0,62})", name))
	}
	if factory == nil {
		panic(fmt.Sprintf("flowlet: Register: nil factory for %q", name))
	}
	for _, o := range info.Outputs {
		if err := CheckOutputName(o); err != nil {
			panic(fmt.Sprintf("flowlet: Register %q: %v", name, err))
		}
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("flowlet: Register called twice for type %q", name))
	}
	info.Outputs = slices.Clone(info.Outputs)
	registry[name] = Type{Name: name, New: factory, Info: info}
}

// reservedOutputs are the outputs the runtime names itself: a flowlet's
// dead letters are queue "<flowlet>.dlq", their replay "<flowlet>.dlq-replay"
// (planner.ReservedOutputs).
var reservedOutputs = []string{"dlq", "dlq-replay"}

// CheckOutputName reports why name cannot be a declared output
// (TypeInfo.Outputs): an output is the second part of its queue's name,
// "<flowlet>.<output>", so it follows the rule of names in the app YAML,
// [a-z0-9][a-z0-9_-]{0,62}, and is not one the runtime uses itself (dlq,
// dlq-replay). The planner refuses connections from such an output.
func CheckOutputName(name string) error {
	switch {
	case !typeNameRE.MatchString(name):
		return fmt.Errorf("invalid output name %q (want [a-z0-9][a-z0-9_-]{0,62})", name)
	case slices.Contains(reservedOutputs, name):
		return fmt.Errorf("output name %q is reserved for the runtime's dead-letter queues (<flowlet>.dlq, <flowlet>.dlq-replay)", name)
	}
	return nil
}

// Lookup returns the registered type of that name.
func Lookup(name string) (Type, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	t, ok := registry[name]
	t.Info.Outputs = slices.Clone(t.Info.Outputs)
	return t, ok
}

// Types returns every registered type, sorted by name.
func Types() []Type {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]Type, 0, len(registry))
	for _, t := range registry {
		t.Info.Outputs = slices.Clone(t.Info.Outputs)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// unregister is for tests.
func unregister(name string) {
	registryMu.Lock()
	delete(registry, name)
	registryMu.Unlock()
}
