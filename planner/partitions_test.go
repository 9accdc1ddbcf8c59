package planner

import "testing"

// partitions on a connection sets its queue's partition count: every
// connection of the queue that sets it agrees, it is in range, and no
// consumer has more instances than partitions.
func TestConnectionPartitions(t *testing.T) {
	ok := `app: x
flowlets:
  src: {type: file_source}
  a: {type: counter}
  b: {type: counter, instances: 2}
connections:
  - {from: src, to: a, partitions: 2}
  - {from: src, to: b}
`
	p, err := Parse("app.yaml", []byte(ok), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if q := p.Queue("src.out"); q.Partitions != 2 || p.Connections[0].Partitions != 2 || p.Connections[1].Partitions != 0 {
		t.Errorf("queue partitions %d, connections %d and %d; want 2, 2 and 0", q.Partitions, p.Connections[0].Partitions, p.Connections[1].Partitions)
	}
	bad := `app: x
flowlets:
  src: {type: file_source}
  a: {type: counter}
  b: {type: counter, instances: 3}
  c: {type: counter}
connections:
  - {from: src, to: a, partitions: 2}
  - {from: src, to: b}
  - {from: src, to: c, partitions: 4}
  - {from: a, to: c, partitions: 0}
`
	_, err = Parse("app.yaml", []byte(bad), testOptions())
	want := "app.yaml:9:5: flowlet \"b\" has 3 instances, more than the 2 partition(s) of queue src.out: an instance reads whole partitions, so 1 would idle\n" +
		"app.yaml:10:36: queue src.out has 2 partitions (connection at 8:5), so this connection cannot ask for 4: a queue has one partition count\n" +
		"app.yaml:11:34: partitions must be between 1 and 4096, got 0"
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	// Without partitions, the queue has the default 64.
	_, err = Parse("app.yaml", []byte(`app: x
flowlets:
  src: {type: file_source}
  a: {type: counter, instances: 65}
connections:
  - {from: src, to: a}
`), testOptions())
	want = `app.yaml:6:5: flowlet "a" has 65 instances, more than the 64 partition(s) of queue src.out: an instance reads whole partitions, so 1 would idle`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}
