// Package queuetest is the conformance suite every queue.Backend must pass:
//
//	func TestConformance(t *testing.T) {
//		queuetest.Run(t, func(t *testing.T) *queuetest.Env { ... })
//	}
//
// It checks the semantics the runtime relies on: every strategy, commit,
// abort and redelivery, a lost consumer's partitions passing on once its
// transaction timed out, visibility against in-progress producers, rescaling
// under load with per-key order, TTL, depth limits, eviction giving space
// back, inspection and bad input.
package queuetest
