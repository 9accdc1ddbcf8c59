package pluginhost_test

import (
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// BenchmarkEmptyCall measures a step that carries nothing: the fixed cost
// of a round trip to the plugin process (specs/plugins.md).
//
//	go test -run '^$' -bench EmptyCall ./internal/pluginhost
func BenchmarkEmptyCall(b *testing.B) {
	p := open(b, "empty", "testplugin", options(b, nil))
	f := p.Type().New()
	ctx := flowlettest.New("empty")
	if err := ctx.Init(f, nil); err != nil {
		b.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	bp := f.(flowlet.BatchProcessor)
	b.ResetTimer()
	for range b.N {
		if err := bp.ProcessBatch(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
}
