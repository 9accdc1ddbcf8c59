package flowlets

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// benchLines generates a log of 100,000 lines with the example's generator.
func benchLines(b *testing.B) [][]byte {
	b.Helper()
	dir := b.TempDir()
	gen := buildTool(b, dir, "./examples/weblog/gen")
	log := filepath.Join(dir, "access.log")
	if out, err := exec.Command(gen, "-lines", "100000", "-out", log).CombinedOutput(); err != nil {
		b.Fatalf("gen: %v\n%s", err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

func BenchmarkParseLine(b *testing.B) {
	lines := benchLines(b)
	var p LineParser
	var n int64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		l := lines[i%len(lines)]
		n += int64(len(l))
		p.Parse(l)
	}
	b.SetBytes(n / int64(b.N))
}

// BenchmarkParserStep is one 4096-line step of the parser flowlet (on the
// fake Context, malformed lines failing the step as without a runtime are
// left out).
func BenchmarkParserStep(b *testing.B) {
	lines := benchLines(b)
	var p LineParser
	var evs []flowlet.Event
	for _, l := range lines {
		if _, _, ok := p.Parse(l); ok && len(evs) < 4096 {
			evs = append(evs, flowlet.Event{Payload: l})
		}
	}
	parser := &Parser{}
	c := flowlettest.New("parser")
	b.ResetTimer()
	for b.Loop() {
		if err := parser.ProcessBatch(c, evs); err != nil {
			b.Fatal(err)
		}
		c.Abort()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/line")
}
