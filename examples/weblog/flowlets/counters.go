package flowlets

import (
	"github.com/flowrun/flowrun/flowlet"
)

// Counter tables of the counting flowlets.
const (
	ViewsCounters  = "views"  // weblog_page_views: path → page views
	HitsCounters   = "hits"   // weblog_unique_visitors: HOST → requests
	StatusCounters = "counts" // weblog_status_counts: status → requests
)

// Counter is the flowlet behind weblog_page_views, weblog_unique_visitors
// and weblog_status_counts: it adds each count record's count to the
// counter of its value in one Counters table. Counters never conflict, so
// it runs with any number of instances and any strategy; hash partitioning
// (by path, by ip) only keeps each key's increments on one instance.
type Counter struct {
	// Table is the Counters table written.
	Table string
}

// Init rejects any config.
func (c *Counter) Init(ic flowlet.InitContext) error { return ic.Config.Known() }

// CheckConfig implements flowlet.ConfigChecker: Init only reads the config.
func (c *Counter) CheckConfig(ic flowlet.InitContext) error { return c.Init(ic) }

// BorrowsBatch: ProcessBatch keeps nothing of its slice of events once it
// returned (runtime.BatchBorrower: the runtime may reuse the slice).
func (*Counter) BorrowsBatch() {}

// ProcessBatch adds the batch's counts.
func (c *Counter) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	counters := ctx.Counters(c.Table)
	for i := range evs {
		n, v, err := DecodeCount(evs[i].Payload)
		if err != nil {
			return err
		}
		key, long := CounterKey(v)
		if long {
			if err := ctx.State(LongKeysTable).Put(key, v); err != nil {
				return err
			}
		}
		if err := counters.Add(key, n); err != nil {
			return err
		}
	}
	return nil
}
