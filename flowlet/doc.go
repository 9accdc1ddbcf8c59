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
together. Ticker's Tick runs every `tick:` interval in a transaction of its
own: windows close and buffers flush there.

# Registering a type

Built-in types register by name in an init function, with what the planner
needs to check connections:

	func init() {
		flowlet.Register("pageviews", func() flowlet.Flowlet { return &PageViews{} },
			flowlet.TypeInfo{Sink: true, Doc: "counts views per path"})
	}

# Testing

Package flowlettest runs a flowlet without a runtime: a fake Context with
state in maps and recorded emits, and the same commit-or-abort step
semantics (see the package example).

# Implementations

This package only declares interfaces, as database/sql/driver does. The
runtime implements Context; internal/state implements Table and Counters on
Badger as transaction participants.
*/
package flowlet
