package runtime

import (
	"fmt"
	"math"
	"os"
	rt "runtime/debug"
	"strconv"
	"strings"

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

// ParseMemoryLimit reads a --memory-limit value: "auto" (DefaultMemoryLimit,
// or what GOMEMLIMIT in the environment says if it is set), "off" (no limit,
// GOMEMLIMIT ignored), or a size: bytes, or a number with a unit B, KiB, MiB,
// GiB, KB, MB or GB ("512MiB", "1.5GiB"). auto reports whether the value is
// the default. The size is at least 32 MiB: below that the collector would
// run all the time.
func ParseMemoryLimit(s string) (limit int64, auto bool, err error) {
	switch t := strings.TrimSpace(s); strings.ToLower(t) {
	case "", "auto":
		return DefaultMemoryLimit(), true, nil
	case "off", "none":
		return math.MaxInt64, false, nil
	default:
		i := strings.LastIndexAny(t, "0123456789") // the number ends there, the unit follows
		num, unit := t[:i+1], strings.TrimSpace(t[i+1:])
		mult := map[string]float64{"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1e3, "mb": 1e6, "gb": 1e9}[strings.ToLower(unit)]
		f, perr := strconv.ParseFloat(num, 64)
		if mult == 0 || perr != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false, fmt.Errorf("memory limit %q: want auto, off, or a size such as 512MiB or 2GiB", s)
		}
		n := f * mult
		if n < 32<<20 {
			return 0, false, fmt.Errorf("memory limit %q: below the minimum of 32MiB", s)
		}
		if n >= math.MaxInt64 {
			return math.MaxInt64, false, nil
		}
		return int64(n), false, nil
	}
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
