package planner

// Options are the parts of parsing that depend on the world outside the
// file: the environment and the set of built-in flowlet types. Both are
// injected so that the planner stays pure and testable.
type Options struct {
	// LookupEnv resolves ${VAR} references; nil means os.LookupEnv.
	LookupEnv LookupFunc

	// Types lists the built-in flowlet types by name. When nil, type names
	// are not checked (only that they are non-empty) and no output or
	// source/sink rules apply to typed flowlets. Plugins are never checked
	// here because their outputs are only known once they are built.
	Types map[string]TypeInfo
}

// TypeInfo is what the planner needs to know about a built-in flowlet type.
type TypeInfo struct {
	// Outputs are the output names the type emits on. When empty, any
	// output name is accepted.
	Outputs []string

	// Source types produce events without consuming any (they read files,
	// sockets, ...), so connecting anything to them is an error.
	Source bool

	// Sink types only consume, so connecting from them is an error.
	Sink bool

	// SingleInstance types run as one instance: instances above 1 is an
	// error.
	SingleInstance bool

	// NoTick types have no Tick: a `tick:` on them would do nothing, so it
	// is an error. (Zero for types that do tick, and for plugins.)
	NoTick bool

	// CheckConfig, when set, checks a flowlet's config (after
	// interpolation) for the given instance count, without side effects.
	// An error is reported at the config field it names (an error with a
	// method ConfigField() string), else at the flowlet's config.
	CheckConfig func(flowlet string, instances int, config map[string]any) error
}
