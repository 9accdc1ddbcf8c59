/*
Package flowlet is the API a flowlet author writes against: the only flowrun
package a flowlet imports.

A flowlet is one processing stage of an app. The app YAML (specs/app-yaml.md)
names its type, its config and how many instances run; durable queues
connect it to other flowlets. The runtime runs each instance as a loop of
steps, and each step is one transaction: the events it dequeues, the state it
writes and the events it emits commit together or not at all. A flowlet
therefore never deals with failures itself: if it returns an error, panics or
the process dies, the step is as if it never happened, and the same input
comes again. That is what makes results exactly-once.

# Writing a flowlet

Implement Process for one event at a time (or ProcessBatch for a whole step),
and optionally Init, Tick and Close:

	type PageViews struct{ minBytes int }

	func (p *PageViews) Init(ic flowlet.InitContext) error {
		var err error
		p.minBytes, err = ic.Config.Int("min_bytes", 0)
		return err
	}

	func (p *PageViews) Process(ctx flowlet.Context, ev flowlet.Event) error {
		path, _ := ev.Key("path")
		return ctx.Counters("views").Add([]byte(path), 1)
	}

Through Context a step can:

  - Emit(output, payload, opts...) events to a named output; Key(name, value)
    sets the partition key a hash-partitioned consumer groups by (the
    producer must set the queue's key on every event of that output), and
    EventTime and TraceID set headers;
  - read and write State(name), a key-value Table: reads see the step's
    snapshot plus its own writes, and two steps writing the same key at once
    conflict (one is retried), so read-modify-write is safe;
  - Add to Counters(name), which never conflict, however hot the key;
  - learn its Name, Instance and Instances, and log through Logger.

Sources (TypeInfo.Source) implement Generate instead of Process and keep
their position (a file offset, say) in State, so position and events commit
together. Generate returns ErrIdle when nothing is available yet (the
runtime waits before calling again) and ErrEndOfInput once the input is
used up (`flowrun run --drain` waits for every source to say so).
Ticker's Tick runs every `tick:` interval in a transaction of its own:
windows close and buffers flush there. Every instance ticks, and tables are
shared by the instances: a Tick that reports a whole table runs once per
instance (run one instance, or have each report only what it wrote).

An event that must not be retried (malformed input) fails with
Permanent(err): it goes to the dead-letter queue after that one attempt;
any other error is retried retries.max times (the attempts are the
event's, across instances). A step can also dead-letter an event itself and
go on: the runtime's Context implements

	DeadLetter(payload []byte, reason string) error
	DeadLetterEvent(ev Event, reason string) error // keeps its id, input, keys: replayable

matched with a type assertion on an interface of your own (runtime.DeadLetterer
and runtime.EventDeadLetterer name them; flowlettest implements both).

# Concurrency and memory

Each instance runs its steps one at a time on a goroutine of its own; a
flowlet value is one instance's, so its fields need no lock. Instances of
one flowlet run at once and share its tables and counters (conflicting
writes are retried). Copy an event's Payload to keep it after Process
returns; values returned by Table.Get are copies the flowlet may keep and
modify. In process, a table scan sees the step's snapshot plus the step's
writes made before the Scan call (a plugin's scan reads in pages and may
also see writes made during it).

# Registering a type

Built-in types register by name in an init function, with what the planner
needs to check connections:

	func init() {
		flowlet.Register("pageviews", func() flowlet.Flowlet { return &PageViews{} },
			flowlet.TypeInfo{Sink: true, Doc: "counts views per path"})
	}

A registered type reaches an app in one of two ways: build your own
flowrun binary, a main that imports your package for its init and calls
runtime/cli's Main (package cmd/flowrun is exactly that, with the built-in
types), or serve the type from a plugin process (package flowlet/plugin,
`plugin:` in the app YAML; specs/plugins.md). A type that implements
ConfigChecker has its config checked while the app is planned, at the
field's file:line:col.

# Testing

Package flowlettest runs a flowlet without a runtime: a fake Context with
state in maps and recorded emits, and the same commit-or-abort step
semantics (its package doc says where it is simpler than the runtime).

# Implementations

This package declares the interfaces and the helpers around them (Config,
Register, the errors); it implements none of them, as database/sql/driver
does. The runtime implements Context; internal/state implements Table and
Counters on Badger as transaction participants.
*/
package flowlet
