package locks

import (
	"context"
	"errors"
	"sync"
	"time"
)

// campaignWait is how long one HOLD of a campaign waits in the key's line
// before Campaign sends it again: a campaign waits as long as it takes.
// (A variable for the tests.)
var campaignWait = 60 * time.Second

// Election is a leader election, etcd's shape made of a hold: its leader
// is the holder of the key named after the election in its lock, the
// leader's note (its address, say) is that lease's note, and the next
// leader is the next in the key's line, with a greater fence. Any number
// of processes, in any holdline client, may campaign in one election; at
// most one of them leads at a time.
//
//	e := lock.Election("billing")
//	err := e.Campaign(ctx, "10.0.0.5:8080", func(ctx context.Context, lead *locks.Leadership) error {
//		return serve(ctx, lead.Fence()) // ctx ends the moment the leadership is lost
//	})
//	leader, err := e.Leader(ctx)   // nil when nobody leads
//	leaders, err := e.Observe(ctx) // the present leader first, then every change
//
// An Election is safe for use by many goroutines at once.
type Election struct {
	lock *Lock
	name string
}

// Election answers the election named name in the lock: its leader holds
// the lock's key name (a key's rules: 1 to 1,024 bytes of UTF-8 without
// control characters, checked when the election is used). Elections of one
// name on one lock, from any handle or client, are one election.
func (l *Lock) Election(name string) *Election {
	return &Election{lock: l, name: name}
}

// Name answers the election's name: the key its leader holds.
func (e *Election) Name() string { return e.name }

// Lock answers the lock the election's key is in.
func (e *Election) Lock() *Lock { return e.lock }

// Leader is who leads an election, as the server last told.
type Leader struct {
	// Note is the leader's note: what it campaigned with, or proclaimed
	// since.
	Note string
	// Fence is the leader's lease's fence: every later leader has a
	// greater one.
	Fence uint64
	// HeldFor is how long the leader had led when the server answered
	// Leader. Observe's items carry no time: it is zero in them.
	HeldFor time.Duration
}

// Leadership is a campaign's win: the lease of the election's key, held
// while the function given to Campaign runs.
type Leadership struct {
	election *Election
	lease    *Lease

	mu      sync.Mutex
	note    string
	sent    uint64 // NOTEs sent
	applied uint64 // the newest NOTE answered OK, by its number
	over    bool   // the campaign's function returned
}

// Campaign waits, as long as it takes, until it leads the election, then
// runs fn as its leader with note for its note, and resigns (lets the key
// go, so that the next campaigner is elected) when fn returns or panics.
// It answers fn's error unchanged.
//
// fn's ctx ends the moment the leadership is lost: the lease was lost
// (its connection dropped, the server could not be heard from for the
// ttl, maxHold passed; the network rules of every hold apply) or ctx
// ended. Cause(ctx) tells why. A lost leadership makes Campaign answer
// ErrLost once fn returns, as Hold does. A ctx that ends while Campaign
// waits takes it out of the line at once, and Campaign answers ctx.Err().
//
// Waiting, Campaign repeats a HOLD of a long wait while the key stays
// held; any other failure (ErrClosed for a server that cannot be reached,
// ErrInvalid for a bad name or note) is answered at once. A note is 1 to
// 1,024 bytes of UTF-8 without control characters (the server's rule, and
// its text when refused). On a lock of several permits the leader takes
// them all (Exclusive): it leads alone.
func (e *Election) Campaign(ctx context.Context, note string, fn func(ctx context.Context, lead *Leadership) error) error {
	if fn == nil {
		return keyError(KindInvalid, e.lock.name, e.name, "the function is nil")
	}
	for {
		ran := false
		err := e.lock.Hold(ctx, e.name, func(ctx context.Context, lease *Lease) error {
			ran = true
			lead := &Leadership{election: e, lease: lease, note: note}
			defer lead.end()
			return fn(ctx, lead)
		}, Wait(campaignWait), Exclusive(), Note(note))
		if ran || ctx.Err() != nil || !errors.Is(err, ErrInUse) {
			return err
		}
	}
}

// Fence answers the leadership's fence: greater than every earlier
// leader's of the election. Writes made as leader should carry it.
func (d *Leadership) Fence() uint64 { return d.lease.Fence }

// Note answers the leader's note: what it campaigned with, or the last
// Proclaim the server took.
func (d *Leadership) Note() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.note
}

// Err answers nil while the leadership holds, and the lost error (kind
// KindLost) once it is lost; it reads the clock itself, as Lease.Err does.
func (d *Leadership) Err() error { return d.lease.Err() }

// end: the campaign's function returned; Proclaim refuses from now on.
func (d *Leadership) end() {
	d.mu.Lock()
	d.over = true
	d.mu.Unlock()
}

// Proclaim replaces the leader's note with note (NOTE on the server), so
// that Leader and every observer see the new one, without an election.
// It answers nil once the server took it; the server's KindInvalid for a
// bad note (the note unchanged); the lost error (KindLost) when the
// leadership is lost, or is lost before the answer; KindInvalid once the
// campaign's function has returned ("lock L: key "K": proclaimed after the
// leadership ended: invalid"); ctx.Err() when ctx ends first (the
// server may still take the note).
func (d *Leadership) Proclaim(ctx context.Context, note string) error {
	d.mu.Lock()
	if lost := d.lease.state.check(); lost != nil {
		d.mu.Unlock()
		return lost
	}
	if d.over {
		d.mu.Unlock()
		return errProclaimEnded(d.election.lock.name, d.lease.Key)
	}
	// Sent while the function runs, so before its RELEASE.
	d.sent++
	n := d.sent
	wait := d.lease.sendNote(note)
	d.mu.Unlock()
	if err := wait(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	if n > d.applied {
		d.applied, d.note = n, note
	}
	d.mu.Unlock()
	return nil
}

// Leader answers the election's leader as the server knows it now
// (INSPECT of its key), or nil when nobody leads. It takes a connection
// of its own and waits in no line; its errors are Inspect's.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	info, err := e.lock.Inspect(ctx, e.name)
	if err != nil || info == nil || !info.Held || info.Holder == nil {
		return nil, err
	}
	l := &Leader{Note: info.Holder.Note, Fence: info.Holder.Fence}
	if info.HeldFor != nil {
		l.HeldFor = *info.HeldFor
	}
	return l, nil
}
