package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	app := fs.String("app", "examples/weblog/app.yaml", "the app file")
	data := fs.String("data", "", "the app's store (default: the runtime's default for the app)")
	out := fs.String("out", "", "output file (default stdout)")
	dlq := fs.String("dlq", "", "also write the parsers' dead letters to this file, one per line")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "export: unexpected arguments")
		return 2
	}
	if err := export(*app, *data, *out, *dlq, stdout); err != nil {
		fmt.Fprintln(stderr, "export:", err)
		return 1
	}
	return 0
}

func export(appFile, data, out, dlq string, stdout io.Writer) error {
	// Types are not checked: the app ran, so it planned.
	plan, err := planner.ParseFile(appFile, planner.Options{})
	if err != nil {
		return err
	}
	roles, err := FindRoles(plan)
	if err != nil {
		return err
	}
	if data == "" {
		data = runtime.DefaultDataDir(plan.App)
	}
	st, err := runtime.OpenStore(data)
	if err != nil {
		return err
	}
	res, err := Export(roles, runtimeStore{st, plan.App})
	if err == nil && dlq != "" {
		err = writeDLQ(roles, runtimeStore{st, plan.App}, dlq)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	if out == "" {
		_, err = stdout.Write(js)
		return err
	}
	return os.WriteFile(out, js, 0o644)
}

func writeDLQ(roles Roles, s Store, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	_, err = WriteDeadLetters(roles, s, w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
