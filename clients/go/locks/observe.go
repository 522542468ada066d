package locks

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
)

// observeBuffer is how many pushes one observing connection keeps for
// the reader of Observe's channel; past it the connection reads nothing
// more until the reader catches up (the server disconnects an observer
// that leaves 1 MiB unread, and Observe then starts again from the
// present state).
const observeBuffer = 256

// How long Observe waits before it observes again after a failure: at
// once the first time (a connection killed, a partition closed), then
// from the first pause, doubling up to the last.
const (
	observeFirstPause = 100 * time.Millisecond
	observeLastPause  = 2 * time.Second
)

// observing, when set (by the tests), is told of each connection an
// observer has started to observe on.
var observing atomic.Pointer[func(c *conn)]

// Observe watches the election: the channel yields the present leader
// (nil when nobody leads) first, then every change, in the server's
// order: a Leader when one is elected or proclaims a new note, nil when
// the leader's lease ends (resigned, lost, its connection gone). It is
// closed when ctx ends, or the store is closed.
//
// Observe uses a connection of its own (RESP3 OBSERVE on the server; in a
// cluster, on the node that serves the election's key). Its first OBSERVE
// is sent before Observe answers, and its failure is Observe's error (a
// bad name KindInvalid, a closed store KindClosed, a server without
// OBSERVE its reply as KindInvalid). Later, when the connection breaks,
// goes silent for the lock's ttl (at least 1s; it PINGs every third of
// it), or the server says the key's store or partition closed, it
// observes again, on a new connection, until that works, and yields the
// present state again: a reader may then see a leader twice, and misses
// no leader that is still leading. A reader that falls far behind is
// treated the same way (see observeBuffer). Items are the channel's
// reader's to keep.
func (e *Election) Observe(ctx context.Context) (<-chan *Leader, error) {
	if bad := checkKey(e.lock.name, e.name); bad != nil {
		return nil, bad
	}
	if e.lock.store.pool.isClosed() {
		return nil, errStoreClosed(e.lock.name, e.name)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := &observer{election: e}
	w, err := o.observe(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan *Leader)
	go o.run(ctx, w, out)
	return out, nil
}

// observer is one Observe's goroutine and what it knows.
type observer struct {
	election *Election
	// leader is the last leader yielded, nil when none: the end of a
	// lease of its fence yields nil.
	leader *Leader
}

// watching is one observing connection and the pushes it has read.
type watching struct {
	pool   *pool
	conn   *conn
	pushes chan value
}

// observe sends OBSERVE on a connection of its own to the key's node,
// following MOVED and CLUSTERDOWN as Hold does, and answers that
// connection once the server said OK.
func (o *observer) observe(ctx context.Context) (*watching, error) {
	l, key := o.election.lock, o.election.name
	var t tries
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w, err := o.observeOnce(ctx, &t)
		rd, ok := err.(redirect)
		if !ok {
			return w, err
		}
		if err := l.store.router.follow(ctx, l.name, key, rd, &t); err != nil {
			return nil, err
		}
	}
}

func (o *observer) observeOnce(ctx context.Context, t *tries) (*watching, error) {
	l, key := o.election.lock, o.election.name
	p, c, err := l.store.connFor(ctx, key, t)
	if err == errPoolClosed {
		return nil, errStoreClosed(l.name, key)
	} else if err != nil {
		return nil, err
	}
	w := &watching{pool: p, conn: c, pushes: make(chan value, observeBuffer)}
	c.setObserved(func(v value) {
		select {
		case w.pushes <- v:
		case <-c.closed:
		}
	})
	r, err := p.ask(ctx, c, "OBSERVE", l.name, key)
	if err != nil {
		return nil, err
	}
	if err := l.unanswered(p, c, r, key); err != nil {
		return nil, err
	}
	if r.v.isError() {
		p.discard(c, errShutAbandoned)
		return nil, l.refused(r.v.text, key)
	}
	if hook := observing.Load(); hook != nil {
		(*hook)(c)
	}
	return w, nil
}

// run yields what w's connection is told, and when it is over observes
// again, until ctx ends or the store closes; then it closes out.
func (o *observer) run(ctx context.Context, w *watching, out chan<- *Leader) {
	defer close(out)
	for {
		again := o.watch(ctx, w, out)
		w.pool.discard(w.conn, errShutAbandoned)
		if !again {
			return
		}
		var err error
		w, err = o.observe(ctx)
		for pause := observeFirstPause; err != nil; pause = min2(2*pause, observeLastPause) {
			if ctx.Err() != nil || o.election.lock.store.pool.isClosed() {
				return
			}
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return
			}
			w, err = o.observe(ctx)
		}
	}
}

// watch yields the pushes of w's connection, and PINGs it, until it ends:
// again is false when ctx ended or the store closed, true when the
// connection broke, went silent or was told closed.
func (o *observer) watch(ctx context.Context, w *watching, out chan<- *Leader) (again bool) {
	ttl := o.election.lock.ttl
	every := ttl / 3
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	silentFor := waitGrace(ttl)
	beat := time.NewTicker(every)
	defer beat.Stop()
	var ping *call
	for {
		select {
		case <-ctx.Done():
			return false
		case <-w.conn.closed:
			return !w.pool.isClosed() && w.conn.deadReason() != errShutStoreClosed
		case v := <-w.pushes:
			item, yield, closed := o.item(v)
			if closed {
				return true
			}
			if !yield {
				continue
			}
			select {
			case out <- item:
			case <-ctx.Done():
				return false
			}
		case <-beat.C:
			if ping != nil {
				select {
				case <-ping.reply:
					ping = nil
				default:
					if time.Duration(monoNow()-ping.sent) >= silentFor {
						w.conn.close(errShutSilent)
						return true
					}
				}
			}
			if ping == nil {
				ping = w.conn.request("PING")
			}
		}
	}
}

// item reads one push, ["observe", lock, key, event, fence, permits,
// holder, note]: yield says whether it is an item to yield (a Leader, or
// nil for none), closed that the observation is over and must be sent
// again.
func (o *observer) item(v value) (item *Leader, yield, closed bool) {
	if len(v.items) < 8 || v.items[1].text != o.election.lock.name || v.items[2].text != o.election.name {
		return nil, false, false
	}
	fence := uint64(v.items[4].num)
	switch strings.ToLower(v.items[3].text) {
	case "held", "granted":
		o.leader = &Leader{Note: v.items[7].text, Fence: fence}
		copied := *o.leader
		return &copied, true, false
	case "free":
		o.leader = nil
		return nil, true, false
	case "released", "expired", "revoked", "disconnected":
		if o.leader == nil || o.leader.Fence != fence {
			return nil, false, false // another holder's end (a lock of several permits)
		}
		o.leader = nil
		return nil, true, false
	case "closed":
		o.leader = nil
		return nil, false, true
	}
	return nil, false, false // an event this client does not know
}

func min2(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
