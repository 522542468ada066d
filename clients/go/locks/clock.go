package locks

import "time"

// epoch anchors the monotonic clock the leases are timed by.
var epoch = time.Now()

// monoNow is the monotonic time in nanoseconds since epoch: it does not
// jump with the wall clock, and it goes on while the process is stopped,
// which is what a lease's deadline must be measured by.
func monoNow() int64 { return int64(time.Since(epoch)) }

// lossMargin is how long before the server may let a silent lease go the
// client takes it for lost, to cover its own timer's lateness: a tenth of
// the ttl, at least 10ms.
func lossMargin(ttl time.Duration) time.Duration {
	if m := ttl / 10; m > 10*time.Millisecond {
		return m
	}
	return 10 * time.Millisecond
}

// waitGrace is how long past its wait a waiting HOLD may go unanswered
// before the client gives up on the connection: the ttl, at least 1s.
func waitGrace(ttl time.Duration) time.Duration {
	if ttl > time.Second {
		return ttl
	}
	return time.Second
}
