package flowlet_test

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// Parser splits "METHOD PATH STATUS" lines: pages go to "pages" keyed by path,
// anything else fails the step (and ends in the dead-letter queue after the
// retries).
type Parser struct{ method string }

func (p *Parser) Init(ic flowlet.InitContext) error {
	if err := ic.Config.Known("method"); err != nil {
		return err
	}
	var err error
	p.method, err = ic.Config.String("method", "GET")
	return err
}

func (p *Parser) Process(ctx flowlet.Context, ev flowlet.Event) error {
	f := strings.Fields(string(ev.Payload))
	if len(f) != 3 {
		// Retrying cannot help: to the dead-letter queue at once.
		return flowlet.Permanent(fmt.Errorf("malformed line %q", ev.Payload))
	}
	if f[0] != p.method {
		return nil
	}
	if err := ctx.Counters("status").Add([]byte(f[2]), 1); err != nil {
		return err
	}
	return ctx.Emit("pages", []byte(f[1]), flowlet.Key("path", f[1]))
}

// Views counts page views per path, in counters that commit with each step,
// and reports them on each tick.
type Views struct{}

func (Views) Process(ctx flowlet.Context, ev flowlet.Event) error {
	path, _ := ev.Key("path")
	return ctx.Counters("views").Add([]byte(path), 1)
}

// Tick reports the views seen so far, in key order.
func (Views) Tick(ctx flowlet.Context) error {
	it := ctx.Counters("views").Scan(flowlet.ScanOptions{Prefix: []byte("/")})
	defer it.Close()
	var b bytes.Buffer
	for it.Next() {
		fmt.Fprintf(&b, "%s=%d ", it.Key(), it.Count())
	}
	if err := it.Err(); err != nil {
		return err
	}
	return ctx.Emit("report", b.Bytes())
}

func Example() {
	parser := &Parser{}
	pc := flowlettest.New("parser").RequireKey("pages", "path")
	if err := pc.Init(parser, map[string]any{"method": "GET"}); err != nil {
		panic(err)
	}
	for _, line := range []string{"GET /a 200", "GET /b 404", "POST /a 200", "GET /a 200"} {
		if err := pc.Process(parser, flowlettest.Event(line)); err != nil {
			panic(err)
		}
	}
	// A failed step leaves nothing behind.
	err := pc.Process(parser, flowlettest.Event("GET /c 200"), flowlettest.Event("garbage"))
	fmt.Println("error:", err)
	fmt.Println("pages:", pc.Emits("pages"))
	fmt.Println("status 200:", pc.Count("status", "200"))

	views := Views{}
	vc := flowlettest.New("views")
	for _, e := range pc.Emitted() {
		path, _ := e.Key("path")
		vc.Process(views, flowlettest.Event(string(e.Payload), flowlet.Key("path", path)))
	}
	vc.Tick(views)
	fmt.Println("report:", vc.Emits("report"))
	// Output:
	// error: malformed line "garbage"
	// pages: [/a /b /a]
	// status 200: 2
	// report: [/a=2 /b=1 ]
}
