// Package testgate holds a test flowlet's call (a step, a Publish) in flight
// until the test opens the gate: what a test needs to look at the runtime
// while a transaction is under way, without sleeping.
//
//	var gate testgate.Gate // one per flowlet type; one test at a time uses it
//	func (f) Process(...) error { gate.Pass(); ... }
//	entered, open := gate.Hold(t) // later calls wait in Pass
//	<-entered                     // one is waiting now
//	open()                        // let it (and every later one) through
package testgate
