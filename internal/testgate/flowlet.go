package testgate

import "github.com/flowrun/flowrun/flowlet"

// Counting is a flowlet that passes g before each event and then adds 1 to
// its counter n/total: register it once per test package,
//
//	flowlet.Register("t_block", func() flowlet.Flowlet { return testgate.Counting(&gate) }, flowlet.TypeInfo{})
//
// and a test that holds g keeps its steps in flight (Waiting says how many).
func Counting(g *Gate) flowlet.Flowlet { return counting{g} }

type counting struct{ g *Gate }

func (c counting) Process(ctx flowlet.Context, ev flowlet.Event) error {
	c.g.Pass()
	return ctx.Counters("n").Add([]byte("total"), 1)
}
