package runtime

import (
	"math"
	"os"
	rt "runtime/debug"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/queue/badgerq"
)

// AppMemoryAllowance is what DefaultMemoryLimit adds to the store's memory
// budget: the runtime and the flowlets (steps in flight, state caches) and
// the garbage collector's headroom over all of it.
const AppMemoryAllowance = 64 << 20

// DefaultMemoryLimit is the soft memory limit `flowrun run` sets unless told
// otherwise (--memory-limit, or GOMEMLIMIT in the environment): the heap the
// store's Badger DB holds at most (badgerq.MemoryBudget of the options the
// runtime opens it with: memtables, caches, table builders) plus
// AppMemoryAllowance — 210 MiB with the default options.
//
// Why a limit: Badger's memtables and pooled table builders are Go heap,
// about 115 MiB once the pool has filled, and with GOGC's default headroom
// (the heap may grow to twice the live heap before a collection) the
// process's anonymous memory crept towards twice that as the pool filled.
// Under the limit the collector runs earlier instead. GOGC stays as it is:
// the limit only matters when the heap approaches it. It is a soft limit:
// an app whose live heap exceeds it keeps running, with the collector
// taking more CPU (the Go runtime caps that at about half), so set a higher
// one (or "off") for flowlets that keep large state in memory.
func DefaultMemoryLimit() int64 {
	return badgerq.MemoryBudget(badgerq.TunedOptions("", true)) + AppMemoryAllowance
}

// ParseMemoryLimit reads a --memory-limit value (the syntax of
// planner.ParseMemoryLimit, which the app file's runtime.memory_limit
// shares): "auto" (DefaultMemoryLimit, or what GOMEMLIMIT in the
// environment says if it is set), "off" (no limit, GOMEMLIMIT ignored), or a
// size: bytes, or a number with a unit B, KiB, MiB, GiB, KB, MB or GB
// ("512MiB", "1.5GiB"), at least 32 MiB (below that the collector would run
// all the time). auto reports whether the value is the default.
func ParseMemoryLimit(s string) (limit int64, auto bool, err error) {
	n, keyword, err := planner.ParseMemoryLimit(s)
	switch {
	case err != nil:
		return 0, false, err
	case keyword == "auto":
		return DefaultMemoryLimit(), true, nil
	case keyword == "off":
		return math.MaxInt64, false, nil
	}
	return n, false, nil
}

// ApplyMemoryLimit sets the process's soft memory limit from a
// --memory-limit value (see ParseMemoryLimit) and returns it
// (math.MaxInt64: none). With "auto", a GOMEMLIMIT in the environment wins:
// the Go runtime has applied it already, and it is left alone.
func ApplyMemoryLimit(s string) (int64, error) {
	limit, auto, err := ParseMemoryLimit(s)
	if err != nil {
		return 0, err
	}
	if auto && os.Getenv("GOMEMLIMIT") != "" {
		return rt.SetMemoryLimit(-1), nil // -1: read it, change nothing
	}
	rt.SetMemoryLimit(limit)
	return limit, nil
}
