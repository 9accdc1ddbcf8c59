package plugin

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// BufferPool is the gRPC buffer pool of both ends of a plugin connection
// (the SDK's server and pluginhost's client): power-of-two size classes,
// like gRPC's default pool, but buffers are not cleared when reused. gRPC's
// default pool clears a buffer's whole capacity at every Get (a 1 MiB
// buffer for a 100 KiB message), which was 15% of both processes' CPU on
// batches of a few hundred events. Every byte gRPC reads from a buffer it
// wrote first, and a plugin connection carries one flowlet's data, so
// nothing leaks through a dirty buffer.
var BufferPool mem.BufferPool = newDirtyPool()

const (
	minClass = 8  // 256 B
	maxClass = 28 // 256 MiB (MaxMessageSize)
)

type dirtyPool struct {
	pools [maxClass + 1]sync.Pool
}

func newDirtyPool() *dirtyPool { return &dirtyPool{} }

// class is the smallest power-of-two exponent whose size holds n.
func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

func (p *dirtyPool) Get(n int) *[]byte {
	c := class(n)
	if c > maxClass {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.pools[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minClass || c&(c-1) != 0 {
		return // not one of ours
	}
	k := bits.Len(uint(c)) - 1
	if k > maxClass {
		return
	}
	*b = (*b)[:0]
	p.pools[k].Put(b)
}
