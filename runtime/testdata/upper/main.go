// Command upper is a plugin flowlet for the runtime's tests: it upper-cases
// each line, counts lines in the counters "lines", and dead-letters lines
// that start with "bad".
package main

import (
	"bytes"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

type upper struct{}

func (upper) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	for _, ev := range evs {
		if bytes.HasPrefix(ev.Payload, []byte("bad")) {
			if dl, ok := ctx.(interface{ DeadLetter([]byte, string) error }); ok {
				if err := dl.DeadLetter(ev.Payload, "bad line"); err != nil {
					return err
				}
				continue
			}
			return errBad
		}
		if err := ctx.Counters("lines").Add([]byte("n"), 1); err != nil {
			return err
		}
		if err := ctx.Emit("out", bytes.ToUpper(ev.Payload)); err != nil {
			return err
		}
	}
	return nil
}

var errBad = bytesError("bad line")

type bytesError string

func (e bytesError) Error() string { return string(e) }

func main() {
	plugin.Serve(func() flowlet.Flowlet { return upper{} }, flowlet.TypeInfo{Outputs: []string{"out"}, Doc: "upper-cases lines"})
}
