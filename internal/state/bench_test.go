package state

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkStep: one step of 100 counter Adds and 100 table Puts, committed
// on the fast path.
func BenchmarkStep(b *testing.B) {
	e := newEnv(b, true)
	s := e.store(b)
	ctx := e.coord.NewContext(s)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("/path/", i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Start(10 * time.Second)
		for j := range 100 {
			k := keys[(i*100+j)%len(keys)]
			s.Counters("c").Add(k, 1)
			s.Table("t").Put(k, k)
		}
		if err := ctx.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkGet: table Gets inside one step.
func BenchmarkGet(b *testing.B) {
	e := newEnv(b, true)
	s := e.store(b)
	fillKeys(b, e, s, 1000)
	st := e.begin(b, s)
	defer st.abort()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := s.Table("t").Get([]byte(fmt.Sprint(i % 1000))); err != nil {
			b.Fatal(err)
		}
	}
}
