package locks

import (
	"sync"
	"sync/atomic"
	"time"
)

// Lease is what a hold's function is given: the key it holds and the
// fence of this grant.
type Lease struct {
	// Fence is strictly greater than the fence of every earlier grant of
	// this key: a store that takes writes can refuse one whose fence is
	// older than the newest it has seen, which stops a holder that stalled
	// past its lease.
	Fence uint64
	// Key is the key as text (an integer key is its decimal text).
	Key string

	state *leaseState
}

// Err answers nil while the lease is held, and the lost error (kind
// KindLost) once it is lost. It reads the clock itself, so after a stall
// of this process past the lease's deadline it answers lost at once,
// before any reply or timer has been seen.
func (l *Lease) Err() error {
	if e := l.state.check(); e != nil {
		return e
	}
	return nil
}

// leaseState is one grant's life on its connection: when it is taken for
// lost, why, and when nothing more counts.
//
// The server renews a connection's leases whenever it reads a command, so
// a lease whose last answered command was sent at t is held there until
// t + ttl at least, and may be given away from then on. The client takes
// it for lost at t + ttl - margin. A grant counts as an answer to its HOLD
// (sent at the HOLD's send time). The PINGs sent while a HOLD waited are
// answered only after it, so a grant is settled, and judged by the clock,
// once the replies to everything sent before the grant arrived are in.
type leaseState struct {
	lock, key   string
	ttl, margin time.Duration
	clock       func() int64
	// confirmed is the connection's send time (monotonic ns) of the last
	// command the server answered; only the connection's reader writes it.
	confirmed *atomic.Int64
	// onClockLoss closes the connection of a lease lost by the clock: a
	// server that comes back then lets its keys go at once.
	onClockLoss func()

	// id and fence are written by the connection's reader at the grant,
	// before settled or lost are closed, and only read after.
	id    int64
	fence uint64

	mu       sync.Mutex
	settled  bool
	settleBy int64 // while not settled: lost if not settled by then
	lost     *Error
	ended    bool // the function returned: nothing later is a loss
	timer    *time.Timer

	lostCh    chan struct{}
	settledCh chan struct{}
}

func newLeaseState(lock, key string, ttl time.Duration, confirmed *atomic.Int64, onClockLoss func()) *leaseState {
	return &leaseState{
		lock: lock, key: key, ttl: ttl, margin: lossMargin(ttl),
		clock: monoNow, confirmed: confirmed, onClockLoss: onClockLoss,
		lostCh: make(chan struct{}), settledCh: make(chan struct{}),
	}
}

// granted records the grant. With replies still due for commands sent
// before it arrived (lastSent the latest of their send times) it waits
// for them, lost if they are not in by lastSent + ttl - margin; else it
// settles at once.
func (s *leaseState) granted(id int64, fence uint64, due bool, lastSent int64) {
	s.id, s.fence = id, fence
	if !due {
		s.settle()
		return
	}
	s.mu.Lock()
	s.settleBy = lastSent + int64(s.ttl-s.margin)
	s.armLocked()
	s.mu.Unlock()
}

// settle: the replies due at the grant are in; from now on the clock
// judges the lease.
func (s *leaseState) settle() {
	s.mu.Lock()
	if !s.settled {
		s.settled = true
		close(s.settledCh)
	}
	fired := s.expireLocked()
	s.armLocked()
	s.mu.Unlock()
	s.afterClockLoss(fired)
}

// confirm is told of each reply on the lease's connection, with the send
// time of the command it answers. A deadline already passed stays passed:
// a reply that comes after a stall does not make the lease held again.
func (s *leaseState) confirm(sent int64) {
	s.mu.Lock()
	fired := s.expireLocked()
	if sent > s.confirmed.Load() {
		s.confirmed.Store(sent)
	}
	s.mu.Unlock()
	s.afterClockLoss(fired)
}

// check answers the lost error, or nil while the lease is held, reading
// the clock first.
func (s *leaseState) check() *Error {
	s.mu.Lock()
	fired := s.expireLocked()
	lost := s.lost
	s.mu.Unlock()
	s.afterClockLoss(fired)
	return lost
}

// lose marks the lease lost for e; the first reason stays, and nothing is
// a loss once the function has returned.
func (s *leaseState) lose(e *Error) {
	s.mu.Lock()
	s.loseLocked(e)
	s.mu.Unlock()
}

// end is the function's return: the last look at the clock, then nothing
// more is a loss. Answers the lost error, or nil.
func (s *leaseState) end() *Error {
	s.mu.Lock()
	fired := s.expireLocked()
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
	lost := s.lost
	s.mu.Unlock()
	s.afterClockLoss(fired)
	return lost
}

// deadlineLocked is when the lease is lost unless more is answered.
func (s *leaseState) deadlineLocked() int64 {
	if !s.settled {
		return s.settleBy
	}
	return s.confirmed.Load() + int64(s.ttl-s.margin)
}

// expireLocked marks the lease lost when the clock has passed its
// deadline; true when it did so now.
func (s *leaseState) expireLocked() bool {
	if s.lost != nil || s.ended || (!s.settled && s.settleBy == 0) {
		return false
	}
	if s.clock() < s.deadlineLocked() {
		return false
	}
	s.loseLocked(errLostSilent(s.lock, s.key, s.ttl))
	return true
}

func (s *leaseState) loseLocked(e *Error) {
	if s.lost != nil || s.ended {
		return
	}
	s.lost = e
	close(s.lostCh)
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *leaseState) afterClockLoss(fired bool) {
	if fired && s.onClockLoss != nil {
		s.onClockLoss()
	}
}

// armLocked sets the timer for the next look at the clock, at the
// deadline as it stands; when it fires, the deadline may have moved on
// (renewals answered meanwhile) and it is set again.
func (s *leaseState) armLocked() {
	if s.lost != nil || s.ended {
		return
	}
	wait := time.Duration(s.deadlineLocked() - s.clock())
	if s.timer == nil {
		s.timer = time.AfterFunc(wait, s.tick)
	} else {
		s.timer.Reset(wait)
	}
}

func (s *leaseState) tick() {
	s.mu.Lock()
	fired := s.expireLocked()
	s.armLocked()
	s.mu.Unlock()
	s.afterClockLoss(fired)
}

func (s *leaseState) isSettled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled
}
