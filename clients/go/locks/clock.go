package locks

import (
	"strconv"
	"time"
)

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

// waitGrace is how long past its wait, counted from its call, a hold may
// go without an end before the client gives it up (wait_silent): the ttl,
// at least 1s. It also bounds a late grant's RENEW and a RELEASE.
func waitGrace(ttl time.Duration) time.Duration {
	if ttl > time.Second {
		return ttl
	}
	return time.Second
}

// holdBound is one hold's limits, counted from its call. Its wait runs
// out at deadline, whatever the hold did meanwhile (a HOLD sent again
// after a MOVED or a CLUSTERDOWN carries only the wait left); the hold as
// a whole gives up at giveUp, deadline plus the grace, whatever it is
// doing then, so that retries cannot stretch a hold past what its caller
// asked for.
type holdBound struct {
	wait     time.Duration // the whole wait as given, at least 0
	grace    time.Duration // waitGrace of the ttl
	deadline time.Time     // the call plus the wait
	giveUp   time.Time     // deadline plus the grace
}

// newHoldBound starts a hold's bound now, at its call; a wait below 0 is
// 0 (TRYHOLD's).
func newHoldBound(wait, ttl time.Duration) holdBound {
	if wait < 0 {
		wait = 0
	}
	b := holdBound{wait: wait, grace: waitGrace(ttl), deadline: time.Now().Add(wait)}
	b.giveUp = b.deadline.Add(b.grace)
	return b
}

// waitLeft answers args (a HOLD's or TRYHOLD's) with the WAIT argument
// set to the wait left now, in whole milliseconds rounded down, 0 once it
// is spent; args without WAIT (TRYHOLD) come back as they are.
func (b holdBound) waitLeft(args []string) []string {
	if len(args) < 5 || args[3] != "WAIT" {
		return args
	}
	left := time.Until(b.deadline)
	if left < 0 {
		left = 0
	}
	out := append([]string(nil), args...)
	out[4] = strconv.FormatInt(int64(left/time.Millisecond), 10)
	return out
}
