package pluginhost

import "github.com/flowrun/flowrun/flowlet"

// ProcessExited reports whether the host has seen the running process of
// f (a flowlet of Plugin.New) exit, so that a test can kill one between
// calls and know the next call starts another.
func ProcessExited(f flowlet.Flowlet) bool {
	return f.(interface{ exitedForTest() bool }).exitedForTest()
}

func (in *inst) exitedForTest() bool {
	in.pmu.Lock()
	pr := in.pr
	in.pmu.Unlock()
	return pr != nil && pr.exited()
}
