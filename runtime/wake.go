package runtime

import (
	"context"
	"reflect"
	"time"
)

// wakeup is what ended an idle consumer instance's wait.
type wakeup int

const (
	wakeInput wakeup = iota // an input may have entries (or the queue changed)
	wakeStop                // the app stops or Scale removed the instance
	wakeTick                // the flowlet's tick is due
	wakeFinal               // drain asks for a last tick
)

// idle waits, after a step found no input, until one of the inputs' queues
// signals (queue.Notifier: a commit to it, a rescale, partitions released),
// the tick is due, drain asks for the last tick, or the instance stops.
// With wakeFinal it returns the channel to close once the last tick ran.
func (in *instance) idle(ctx context.Context, tickC <-chan time.Time) (wakeup, chan struct{}) {
	var rs [2]<-chan struct{}
	for i, inp := range in.inputs {
		if inp.ready == nil {
			return wakeInput, nil // not found empty: look at once
		}
		if i < len(rs) {
			rs[i] = inp.ready
		}
	}
	if len(in.inputs) > len(rs) {
		return in.idleMany(ctx, tickC)
	}
	// One input and its replay queue, the usual case: no reflection. A nil
	// channel (fewer inputs) never fires.
	select {
	case <-ctx.Done():
		return wakeStop, nil
	case <-in.stop:
		return wakeStop, nil
	case <-rs[0]:
		return wakeInput, nil
	case <-rs[1]:
		return wakeInput, nil
	case <-tickC:
		return wakeTick, nil
	case done := <-in.final:
		return wakeFinal, done
	}
}

// idleMany is idle for instances with more than two inputs.
func (in *instance) idleMany(ctx context.Context, tickC <-chan time.Time) (wakeup, chan struct{}) {
	const fixed = 4
	cases := make([]reflect.SelectCase, fixed, fixed+len(in.inputs))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.stop)}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tickC)}
	cases[3] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.final)}
	for _, inp := range in.inputs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(inp.ready)})
	}
	i, v, _ := reflect.Select(cases)
	switch i {
	case 0, 1:
		return wakeStop, nil
	case 2:
		return wakeTick, nil
	case 3:
		return wakeFinal, v.Interface().(chan struct{})
	}
	return wakeInput, nil
}
