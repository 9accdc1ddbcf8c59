package testgate

import "testing"

func TestGate(t *testing.T) {
	var g Gate
	g.Pass() // open: returns at once
	entered, open := g.Hold(t)
	passed := make(chan struct{})
	go func() { g.Pass(); close(passed) }()
	<-entered
	select {
	case <-passed:
		t.Fatal("Pass returned while the gate was held")
	default:
	}
	open()
	<-passed
	open() // twice is fine
	g.Pass()
}
