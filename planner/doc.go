/*
Package planner turns an app YAML file into a validated Plan: the
flowlets to run, the durable queues between them, and the consumer groups that
split each queue among a flowlet's instances.

The planner is the only place that reads user YAML. Everything downstream
(tx, queue, flowlet, the runtime) receives a Plan whose invariants already
hold, so it never re-validates names, references or graph shape. Treat a
Plan as read-only. It guarantees that:

  - every name matches [a-z0-9][a-z0-9_-]{0,62};
  - every flowlet has exactly one of Type or Plugin, and every default is
    filled in (Instances, BatchSize, Retry);
  - every connection refers to existing flowlets and, when the type declares
    its outputs, to an existing output;
  - the graph is acyclic, so Flowlets is in topological order (producers
    before consumers) and draining the app from its sources terminates;
  - there is one Queue per producer output that has consumers, and one Group
    per consuming flowlet on that queue;
  - all hash groups of a queue partition by the same key, Queue.Key, which
    the producer sets on every event it emits on that output;
  - the connections of one output agree on its queue's partition count
    (Queue.Partitions, 0 for the default of 64), and no consuming flowlet
    has more instances than the queue has partitions.

# Usage

	plan, err := planner.ParseFile("weblog.yaml", planner.Options{
		Types: map[string]planner.TypeInfo{
			"file_source": {Source: true, Outputs: []string{"out"}},
		},
	})
	if err != nil {
		// Every problem in the file at once, sorted by position:
		//   weblog.yaml:7:5: unknown field "instance" in flowlet "parser"; did you mean "instances"?
		//   weblog.yaml:14:15: unknown strategy "roundrobin"; did you mean "round_robin"?
		return err
	}
	for _, f := range plan.Flowlets { // producers first
		start(f.Name, f.Instances, f.Inputs)
	}
	fmt.Print(plan.Text())

The file may also pin settings of `flowrun run` in a top-level runtime
section (HTTP address, memory limit, back-pressure bound, fsync, deferred
commits, step and plugin start timeouts); the plan carries them, each with
its position, as Plan.Runtime, and the command line overrides them.

Errors from Parse are always an ErrorList of *Error values, each carrying
file, line and column; use errors.As to get at them.

# Environment interpolation

Before anything else is checked, every scalar value (not mapping keys) has
${VAR} and ${VAR:default} replaced from the environment (Options.LookupEnv,
os.LookupEnv by default); $${ stands for a literal ${. Interpolation works on
the YAML node tree, so errors keep the exact position of the scalar they came
from. The full format is specified in specs/app-yaml.md.

# Files

One concept per file, in pipeline order: parse.go (entry points),
options.go (Options, TypeInfo),
yamldoc.go (YAML syntax, documents, syntax-error positions), interpolate.go
(${VAR}), decode.go and spec.go (node tree to a typed spec: kinds, unknown
and duplicate keys), config.go (free-form config to Go values), validate.go
(ranges, references, graph shape), runtime.go (the runtime section),
plan.go (the Plan), text.go and dot.go
(renderings), errors.go and suggest.go (reporting).
*/
package planner
