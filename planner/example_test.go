package planner_test

import (
	"errors"
	"fmt"

	"github.com/flowrun/flowrun/planner"
)

func ExampleParse() {
	src := []byte(`
app: weblog
flowlets:
  reader:
    type: file_source
    config:
      path: ${WEBLOG_INPUT:./access.log}
  parser:
    plugin: ./plugins/parser
    instances: 2
connections:
  - from: reader
    to: parser
    strategy: round_robin
`)
	opts := planner.Options{
		LookupEnv: func(string) (string, bool) { return "", false }, // nothing set
		Types:     map[string]planner.TypeInfo{"file_source": {Source: true}},
	}
	plan, err := planner.Parse("weblog.yaml", src, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(plan.Text())
	// Output:
	// app weblog
	//
	// flowlet reader
	//   type        file_source
	//   instances   1
	//   batch_size  100
	//   retries     max 3, backoff 10ms, max_backoff 1s
	//   config      {"path": "./access.log"}
	//   outputs     out
	//
	// flowlet parser
	//   plugin      ./plugins/parser
	//   instances   2
	//   batch_size  100
	//   retries     max 3, backoff 10ms, max_backoff 1s
	//   inputs      reader.out
	//
	// queue reader.out
	//   group parser: round_robin, 2 instances
}

func ExampleErrorList() {
	src := []byte(`
app: weblog
flowlets:
  reader: {type: file_source, instance: 2}
  parser: {plugin: ./plugins/parser}
connections:
  - {from: parser, to: reader, strategy: roundrobin}
`)
	opts := planner.Options{Types: map[string]planner.TypeInfo{"file_source": {Source: true}}}
	_, err := planner.Parse("weblog.yaml", src, opts)
	var list planner.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Printf("line %d col %d: %s\n", e.Line, e.Col, e.Msg)
		}
	}
	// Output:
	// line 4 col 31: unknown field "instance" in flowlet "reader"; did you mean "instances"?
	// line 7 col 24: flowlet "reader" (type file_source) is a source and accepts no input
	// line 7 col 42: unknown strategy "roundrobin"; did you mean "round_robin"?
}
