package locks

import (
	"context"
	"sync"
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

	state   *leaseState
	permits int
	// sendNote sends NOTE for the lease on its connection, and answers
	// what waits for the server's answer (see keyHold.sendNote).
	sendNote func(text string) (wait func(ctx context.Context) error)
}

// Permits answers how many of the key's permits this lease holds: 1
// unless the hold said Take, all of the lock's with Exclusive.
func (l *Lease) Permits() int { return l.permits }

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
// The server renews a connection's leases whenever it reads a command
// from it, and gives a lease away no sooner than ttl after the last such
// read. The client keeps a deadline that is never later than the
// server's:
//
//   - it starts at s + ttl - margin, s the send time of the HOLD (the
//     server granted after reading it, and counts the ttl from the grant);
//   - a reply arriving before the deadline, to a command sent at t, moves
//     it to t + ttl - margin when that is later: the server read the
//     command before it replied, so while the lease was alive, and renewed
//     it then, at t or later;
//   - a reply arriving after the deadline moves nothing (the server may
//     have read its command after the lease ended, and a renewal does not
//     revive a lost lease): a passed deadline is final;
//   - a grant arriving after its first deadline (its HOLD waited about a
//     ttl) has no deadline until a RENEW, which the server answers OK only
//     for a live lease, gives it one from that RENEW's send time.
//
// Crediting instead the replies to PINGs sent while the HOLD waited would
// be wrong: PING does not look at the lease, so a PING held up in the
// network past the lease's end is still answered.
type leaseState struct {
	lock, key   string
	ttl, margin time.Duration
	clock       func() int64
	// fence is written by the connection's reader at the grant, before
	// the grant's reply is handed over, and only read after; a re-attach
	// keeps it.
	fence uint64

	mu sync.Mutex
	// id is the lease's id on the node that holds it: the grant's, then
	// each re-attach's (leaseID reads it).
	id int64
	// onClockLoss closes the connection of a lease lost by the clock: a
	// server that comes back then lets its keys go at once.
	onClockLoss func()
	// moving: the node told the lease moved (a planned hand-over) and it
	// is not re-attached yet: no reply counts for it, and its deadline,
	// once passed, loses it reattach_failed. onMoved starts the re-attach
	// (nil: a lease held without a secret, which never moves).
	moving   bool
	onMoved  func(node string)
	started  bool  // deadline is set: the clock judges the lease
	deadline int64 // monotonic ns: lost from then on
	late     bool  // granted past its first deadline: a RENEW must confirm it
	lost     *Error
	ended    bool // the function returned: nothing later is a loss
	timer    *time.Timer

	lostCh chan struct{}
}

func newLeaseState(lock, key string, ttl time.Duration, onClockLoss func()) *leaseState {
	return &leaseState{
		lock: lock, key: key, ttl: ttl, margin: lossMargin(ttl),
		clock: monoNow, onClockLoss: onClockLoss,
		lostCh: make(chan struct{}),
	}
}

// deadlineFrom is when a lease confirmed by a command sent at sent is
// taken for lost here.
func (s *leaseState) deadlineFrom(sent int64) int64 {
	return sent + int64(s.ttl-s.margin)
}

// granted records the grant of a HOLD or TRYHOLD sent at holdSent, read
// now: in time, the lease starts with its first deadline; past it, it
// waits for a RENEW to confirm it (see confirmedBy).
func (s *leaseState) granted(id int64, fence uint64, holdSent int64) {
	s.fence = fence
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
	first := s.deadlineFrom(holdSent)
	if s.clock() < first {
		s.start(first)
		return
	}
	s.mu.Lock()
	s.late = true
	s.mu.Unlock()
}

// confirmedBy: a RENEW sent at renewSent was answered OK, which the server
// does only for a live lease; a late grant starts from it.
func (s *leaseState) confirmedBy(renewSent int64) {
	s.start(s.deadlineFrom(renewSent))
}

// start gives the lease its first deadline; from now on the clock judges
// it.
func (s *leaseState) start(deadline int64) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return
	}
	s.started, s.deadline = true, deadline
	fired := s.expireLocked()
	s.armLocked()
	s.mu.Unlock()
	s.afterClockLoss(fired)
}

// confirm is told of each reply on the lease's connection, with the send
// time of the command it answers. The clock is read first: a reply that
// arrives after the deadline moves nothing, and the lease stays lost.
func (s *leaseState) confirm(sent int64) {
	s.mu.Lock()
	fired := s.expireLocked()
	if s.started && s.lost == nil && !s.ended && !s.moving {
		if d := s.deadlineFrom(sent); d > s.deadline {
			s.deadline = d
		}
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

// expireLocked marks the lease lost when the clock has passed its
// deadline; true when it did so now.
func (s *leaseState) expireLocked() bool {
	if s.lost != nil || s.ended || !s.started || s.clock() < s.deadline {
		return false
	}
	if s.moving {
		s.loseLocked(errReattachFailed(s.lock, s.key))
	} else {
		s.loseLocked(errLostSilent(s.lock, s.key, s.ttl))
	}
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
	if !fired {
		return
	}
	s.mu.Lock()
	onClockLoss := s.onClockLoss
	s.mu.Unlock()
	if onClockLoss != nil {
		onClockLoss()
	}
}

// armLocked sets the timer for the next look at the clock, at the
// deadline as it stands; when it fires, the deadline may have moved on
// (renewals answered meanwhile) and it is set again.
func (s *leaseState) armLocked() {
	if s.lost != nil || s.ended || !s.started {
		return
	}
	wait := time.Duration(s.deadline - s.clock())
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

// isStarted: the lease has a deadline (it is not a late grant still
// waiting for its RENEW).
func (s *leaseState) isStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// isLate: granted past its first deadline; a RENEW must confirm it.
func (s *leaseState) isLate() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

// leaseID answers the lease's id on the node that holds it now.
func (s *leaseState) leaseID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// moved: the node said the lease moved to node (a push, or MOVED to its
// RENEW or RELEASE). From now on no reply of the old connection counts
// for it, and onMoved, once, starts its re-attach (in the background: it
// returns at once). Nothing for a lease
// lost already, or held without a secret.
func (s *leaseState) moved(node string) {
	s.mu.Lock()
	fired := s.expireLocked()
	start := s.onMoved
	if s.moving || s.lost != nil || start == nil {
		start = nil
	} else {
		s.moving = true
	}
	s.mu.Unlock()
	s.afterClockLoss(fired)
	if start != nil {
		start(node)
	}
}

// canMove: held with a secret, so it can re-attach where it moves.
func (s *leaseState) canMove() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onMoved != nil
}

// isMoving: told it moved, not re-attached yet.
func (s *leaseState) isMoving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.moving
}

// untilDeadline answers how long the lease has left by the clock (0 or
// less once its deadline passed).
func (s *leaseState) untilDeadline() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.deadline - s.clock())
}

// reattached: REATTACH, sent at sent, answered the lease's new id on the
// connection whose clock loss onClockLoss closes. The deadline is counted
// from that send (never moved back), and replies count again. False, and
// nothing changed, when the lease was lost meanwhile or its deadline
// passed before the answer came (a reply after the deadline moves
// nothing): the new lease is then to be let go.
func (s *leaseState) reattached(id int64, sent int64, onClockLoss func()) bool {
	s.mu.Lock()
	fired := s.expireLocked()
	ok := s.lost == nil && s.clock() < s.deadline
	if ok {
		s.id, s.moving, s.onClockLoss = id, false, onClockLoss
		if d := s.deadlineFrom(sent); d > s.deadline {
			s.deadline = d
		}
		s.armLocked()
	}
	s.mu.Unlock()
	s.afterClockLoss(fired)
	return ok
}
