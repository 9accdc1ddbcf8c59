package planner

import "time"

// appSpec is an app file after structural decoding: fields are typed and keep
// their positions, but nothing is cross-checked and no defaults are applied.
type appSpec struct {
	pos         Position // of the top-level mapping
	bad         bool     // not a mapping (reported)
	app         field[string]
	flowlets    []*flowletSpec // in file order
	flowletsBad bool           // flowlets is not a mapping (reported)
	connections []*connectionSpec
	runtime     *runtimeSpec // nil: no runtime section
}

type flowletSpec struct {
	name       string
	pos        Position // of the name
	bad        bool     // not a mapping (reported)
	typ        field[string]
	plugin     field[string]
	instances  field[int]
	batchSize  field[int]
	retryMax   field[int]
	backoff    field[time.Duration]
	maxBackoff field[time.Duration]
	tick       field[time.Duration]
	config     map[string]any
	configPos  Position            // of the config key; zero if absent
	configKeys map[string]Position // of each key of the config mapping
	configBad  bool                // an error was reported inside config: no CheckConfig
}

type connectionSpec struct {
	pos        Position // of the list item
	from       field[string]
	to         field[string]
	strategy   field[string]
	key        field[string]
	partitions field[int]
}

// field is a decoded scalar. set is true only for a well-formed value, so
// validation checks only real values; bad marks a value that was present
// but malformed and already reported, so that validation does not also
// call it missing. Absent and null fields have neither.
type field[T any] struct {
	val T
	set bool
	bad bool
	pos Position
}

// extensionFields in a list of known fields lets keys starting with "x-"
// through, ignored (Docker Compose's extension fields): at the top level
// they are where anchors shared by several flowlets are declared.
const extensionFields = "x-*"

// The known fields, in the order the spec documents them. Unknown fields are
// errors rather than ignored, so a typo never silently becomes a default.
var (
	appFields        = []string{"app", "flowlets", "connections", "runtime", extensionFields}
	flowletFields    = []string{"type", "plugin", "instances", "batch_size", "retries", "tick", "config"}
	connectionFields = []string{"from", "to", "strategy", "key", "partitions"}
	retryFields      = []string{"max", "backoff", "max_backoff"}
)
