// Command testplugin is a plugin flowlet for pluginhost's tests. Each input
// event's payload is a command (see ProcessBatch).
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

type testFlowlet struct {
	prefix string
	ticks  int
	name   string
	inst   int
}

func (f *testFlowlet) Init(ic flowlet.InitContext) error {
	var err error
	if f.prefix, err = ic.Config.String("prefix", ""); err != nil {
		return err
	}
	if fail, _ := ic.Config.Bool("fail_init", false); fail {
		return errors.New("init refused by config")
	}
	// init_started and init_gate are FIFOs: Init writes its pid to the
	// first, then waits until the gate is written and closed, so that a
	// test can act while an Init is in progress.
	if started, _ := ic.Config.String("init_started", ""); started != "" {
		if err := os.WriteFile(started, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return err
		}
		gate, _ := ic.Config.String("init_gate", "")
		if _, err := os.ReadFile(gate); err != nil {
			return err
		}
	}
	f.name, f.inst = ic.Name, ic.Instance
	ic.Logger.Info("initialized", "prefix", f.prefix)
	return nil
}

type permanent struct{ error }

func (permanent) Permanent() bool { return true }

func (f *testFlowlet) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	for _, ev := range evs {
		cmd, arg, _ := strings.Cut(string(ev.Payload), ":")
		var err error
		switch cmd {
		case "panic":
			panic("asked to panic")
		case "exit":
			os.Exit(3)
		case "hang":
			select {}
		case "signal": // arg is a FIFO: opening it waits for the test to read, so the test knows the batch is under way
			if err := os.WriteFile(arg, nil, 0); err != nil {
				return err
			}
		case "sleep":
			ms, _ := strconv.Atoi(arg)
			time.Sleep(time.Duration(ms) * time.Millisecond)
		case "fail":
			return permanent{errors.New("failed on request: " + arg)}
		case "pid":
			err = ctx.Emit("pid", []byte(strconv.Itoa(os.Getpid())))
		case "count":
			c := ctx.Counters("c")
			if err = c.Add([]byte(arg), 1); err == nil {
				var n int64
				if n, err = c.Get([]byte(arg)); err == nil {
					err = ctx.Emit("counts", []byte(fmt.Sprintf("%s=%d", arg, n)))
				}
			}
		case "put":
			k, v, _ := strings.Cut(arg, "=")
			err = ctx.State("t").Put([]byte(k), []byte(v))
		case "del":
			err = ctx.State("t").Delete([]byte(arg))
		case "get":
			v, ok, gerr := ctx.State("t").Get([]byte(arg))
			if gerr != nil {
				return gerr
			}
			if !ok {
				v = []byte("<missing>")
			}
			err = ctx.Emit("got", v)
		case "scan", "cscan":
			lim, _ := strconv.Atoi(os.Getenv("TESTPLUGIN_SCAN_LIMIT"))
			var keys []string
			if cmd == "scan" {
				it := ctx.State("t").Scan(flowlet.ScanOptions{Prefix: []byte(arg), Limit: lim})
				for it.Next() {
					keys = append(keys, string(it.Key())+"="+string(it.Value()))
				}
				err = errors.Join(it.Err(), it.Close())
			} else {
				it := ctx.Counters("c").Scan(flowlet.ScanOptions{Prefix: []byte(arg), Limit: lim})
				for it.Next() {
					keys = append(keys, fmt.Sprintf("%s=%d", it.Key(), it.Count()))
				}
				err = errors.Join(it.Err(), it.Close())
			}
			if err == nil {
				err = ctx.Emit("scanned", []byte(strings.Join(keys, ",")))
			}
		case "log":
			ctx.Logger().Warn("asked to log", "what", arg)
			fmt.Fprintln(os.Stderr, "raw stderr:", arg)
		case "dead":
			dl, ok := ctx.(interface{ DeadLetter([]byte, string) error })
			if !ok {
				return errors.New("no DeadLetter")
			}
			err = dl.DeadLetter(ev.Payload, "dead on request")
		case "deadev":
			dl, ok := ctx.(interface {
				DeadLetterEvent(flowlet.Event, string) error
			})
			if !ok {
				return errors.New("no DeadLetterEvent")
			}
			err = dl.DeadLetterEvent(ev, "dead event on request")
		case "badutf8": // a response that cannot be marshalled
			err = ctx.Emit("out", []byte("x"), flowlet.TraceID("\xff"))
		case "whoami":
			err = ctx.Emit("whoami", []byte(fmt.Sprintf("%s/%d/%d", ctx.Name(), ctx.Instance(), ctx.Instances())))
		default:
			opts := []flowlet.EmitOption{flowlet.Key("k", string(ev.Payload))}
			if !ev.EventTime.IsZero() {
				opts = append(opts, flowlet.EventTime(ev.EventTime))
			}
			if ev.TraceID != "" {
				opts = append(opts, flowlet.TraceID(ev.TraceID))
			}
			for _, kv := range ev.Keys {
				opts = append(opts, flowlet.Key("in_"+kv.Name, kv.Value))
			}
			err = ctx.Emit("out", []byte(f.prefix+strings.ToUpper(string(ev.Payload))), opts...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *testFlowlet) Tick(ctx flowlet.Context) error {
	f.ticks++
	return ctx.Emit("ticks", []byte(fmt.Sprintf("%stick %d", f.prefix, f.ticks)))
}

func (f *testFlowlet) Close() error {
	fmt.Fprintln(os.Stderr, "closing")
	return nil
}

func main() {
	plugin.Serve(func() flowlet.Flowlet { return &testFlowlet{} }, flowlet.TypeInfo{Doc: "pluginhost test flowlet"})
}
