package locks

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// keyHold is one hold of one key, from its HOLD (or TRYHOLD) to its
// RELEASE.
type keyHold struct {
	store *Store
	lock  string
	key   string
	ttl   time.Duration
	// permits: how many the HOLD takes, for the Lease.
	permits int

	pool  *pool // the key's node's
	conn  *conn
	state *leaseState
}

// ask sends HOLD or TRYHOLD and waits for the answer: granted (true), or
// false when TRYHOLD found the key held. In cluster mode the command goes
// to the node that serves the key, and is sent again where a MOVED or
// CLUSTERDOWN answer says (see router.follow). The wait runs from this
// call, not from each send: a HOLD sent again carries the wait left. The
// hold as a whole, every step of it (routing, connecting, the map, the
// CLUSTERDOWN pause, the reply), is bounded by its wait plus its grace
// from this call (see holdBound): past it the hold fails wait_silent.
func (h *keyHold) ask(ctx context.Context, args []string, wait time.Duration) (bool, error) {
	b := newHoldBound(wait, h.ttl)
	bctx, cancel := context.WithDeadline(ctx, b.giveUp)
	defer cancel()
	var t tries
	for sent := 0; ; sent++ {
		if bctx.Err() != nil {
			return false, h.ended(ctx, b)
		}
		if sent > 0 {
			args = b.waitLeft(args)
		}
		granted, err := h.askOnce(ctx, bctx, args, b, &t)
		rd, ok := err.(redirect)
		if !ok {
			return granted, err
		}
		if err := h.store.router.follow(bctx, h.lock, h.key, rd, &t); err != nil {
			if bctx.Err() != nil {
				return false, h.ended(ctx, b)
			}
			return false, err
		}
	}
}

// ended answers why a hold stopped short when its bounded context ended:
// the caller's ctx's error when that ended, else wait_silent (the hold's
// bound passed).
func (h *keyHold) ended(ctx context.Context, b holdBound) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return errWaitSilent(h.lock, h.key, b.wait, b.grace)
}

// askOnce sends HOLD or TRYHOLD on a connection of its own to the key's
// node and waits for the answer: granted, not granted, or a redirect.
// While the HOLD waits the connection renews, and ctx ending or the
// hold's bound passing (bctx, ctx bounded by holdBound) closes it: the
// server then takes the HOLD out of its line. The lease, once granted,
// counts from this HOLD's send time; its grant is read under ctx alone (a
// late grant's RENEW has its own bound).
func (h *keyHold) askOnce(ctx, bctx context.Context, args []string, b holdBound, t *tries) (bool, error) {
	p, c, err := h.store.connFor(bctx, h.key, t)
	switch {
	case err == errPoolClosed:
		return false, errStoreClosed(h.lock, h.key)
	case err != nil && bctx.Err() != nil:
		return false, h.ended(ctx, b)
	case err != nil:
		return false, err
	}
	h.pool = p
	h.conn, h.state = c, c.newLease(h.lock, h.key, h.ttl)
	c.renewFor(h.ttl)
	cl := &call{reply: make(chan result, 1), grant: h.state}
	c.send(cl, args...)
	select {
	case r := <-cl.reply:
		granted, err := h.answer(ctx, r, args[0])
		if granted && ctx.Err() != nil {
			// Ended as the grant came: the function is not run.
			h.release()
			return false, ctx.Err()
		}
		return granted, err
	case <-bctx.Done():
		if ctx.Err() != nil {
			h.pool.discard(c, errShutAbandoned)
			return false, ctx.Err()
		}
		h.pool.discard(c, errShutSilent)
		return false, h.ended(ctx, b)
	}
}

// answer reads the reply to HOLD or TRYHOLD. A grant that came past its
// first deadline is confirmed by a RENEW first; one lost by then answers
// the loss, its function unrun.
func (h *keyHold) answer(ctx context.Context, r result, command string) (bool, error) {
	c := h.conn
	switch {
	case r.err == errShutStoreClosed:
		h.pool.discard(c, r.err)
		return false, errStoreClosed(h.lock, h.key)
	case r.err != nil:
		h.pool.discard(c, r.err)
		return false, errConnectionClosedKey(h.lock, h.key, r.err)
	case r.v.isError():
		h.pool.put(c)
		if rd := h.store.router.redirection(r.v.text); rd != nil {
			return false, rd
		}
		return false, fromReply(r.v.text, h.lock, h.key)
	case r.v.null:
		h.pool.put(c)
		return false, nil
	}
	if _, _, ok := grantOf(r.v); !ok {
		h.pool.discard(c, errShutAbandoned)
		return false, keyError(KindInvalid, h.lock, h.key, "the server answered "+command+" with something other than a lease")
	}
	if h.state.isLate() {
		if err := h.confirmLate(ctx); err != nil {
			return false, err
		}
	}
	if h.pool.isClosed() {
		// The grant raced Close (which let the holder's key go first).
		h.release()
		return false, errStoreClosed(h.lock, h.key)
	}
	if lost := h.state.check(); lost != nil {
		h.release()
		return false, lost
	}
	return true, nil
}

// confirmLate sends RENEW for a grant that arrived past its first
// deadline: the server answers OK only while the lease lives, and the
// reader then starts the lease from the RENEW's send time. LOST (the
// server's text), the connection's end, or no answer within the ttl (at
// least 1s) fail the hold lost.
func (h *keyHold) confirmLate(ctx context.Context) error {
	c := h.conn
	cl := &call{reply: make(chan result, 1), renew: h.state, confirms: h.state}
	c.send(cl, "RENEW", strconv.FormatInt(h.state.id, 10))
	silent := time.NewTimer(waitGrace(h.ttl))
	defer silent.Stop()
	var lost *Error
	select {
	case r := <-cl.reply:
		switch {
		case r.err == errShutStoreClosed:
			h.pool.discard(c, r.err)
			return errStoreClosed(h.lock, h.key)
		case r.err != nil:
			lost = errLostConnection(h.lock, h.key, r.err)
		case r.v.isError() && strings.HasPrefix(r.v.text, "LOST "):
			// The reader lost the lease with the server's text; RELEASE
			// has the server forget it.
			lost = h.release()
			if lost == nil {
				lost = fromReply(r.v.text, h.lock, h.key)
			}
			return lost
		case r.v.isError():
			lost = errLostConnection(h.lock, h.key, fromReply(r.v.text, h.lock, h.key))
		default:
			return nil
		}
	case <-ctx.Done():
		h.pool.discard(c, errShutAbandoned)
		return ctx.Err()
	case <-silent.C:
		lost = errLostSilent(h.lock, h.key, h.ttl)
	}
	h.state.lose(lost)
	if first := h.state.end(); first != nil {
		lost = first // a loss heard before (a push, the connection's end)
	}
	h.pool.discard(c, errShutAbandoned)
	return lost
}

// run runs fn under the granted lease, then lets the key go. A panic in
// fn closes the connection (the server lets the key go at once) and goes
// on.
func (h *keyHold) run(ctx context.Context, fn func(context.Context, *Lease) error) error {
	held := &heldKey{owner: h.store, lock: h.lock, key: h.key, state: h.state, outer: heldIn(ctx)}
	held.running.Store(true)
	hctx := newHoldCtx(ctx, held)
	stopWatch := hctx.watch()
	over := func() {
		held.running.Store(false)
		stopWatch()
		hctx.cancel(context.Canceled)
	}
	returned := false
	defer func() {
		if !returned {
			over()
			h.state.end()
			h.pool.discard(h.conn, errShutAbandoned)
		}
	}()
	fnErr := fn(hctx, &Lease{Fence: h.state.fence, Key: h.key, state: h.state, permits: h.permits, sendNote: h.sendNote})
	returned = true
	over()
	if lost := h.release(); lost != nil {
		if fnErr != nil {
			return lost.withCause(fnErr)
		}
		return lost
	}
	return fnErr
}

// release ends the lease and lets the key go: RELEASE on a live
// connection (kept for the next hold), nothing on a dead one (the server
// let the key go when it closed). Answers the lost error, or nil; a LOST
// answer to RELEASE is a loss whose news had not come yet.
func (h *keyHold) release() *Error {
	lost := h.state.end()
	c := h.conn
	c.idle()
	if c.deadReason() != nil {
		h.pool.discard(c, errShutAbandoned)
		return lost
	}
	cl := c.request("RELEASE", strconv.FormatInt(h.state.id, 10))
	silent := time.NewTimer(waitGrace(h.ttl))
	defer silent.Stop()
	select {
	case r := <-cl.reply:
		switch {
		case r.err != nil:
			h.pool.discard(c, r.err)
		case !r.v.isError():
			h.pool.put(c)
		case r.v.text[:min(len(r.v.text), 5)] == "LOST ":
			if lost == nil {
				lost = fromReply(r.v.text, h.lock, h.key)
			}
			h.pool.put(c)
		default:
			h.pool.discard(c, errShutAbandoned)
		}
	case <-silent.C:
		// The server lets the key go when it sees the connection close.
		h.pool.discard(c, errShutSilent)
	}
	return lost
}

// sendNote sends NOTE for the lease, and answers what waits for the
// server's answer: nil once the note is taken, the server's KindInvalid
// for a bad note, the lost error when the lease is lost first (a LOST
// answer loses it), ctx.Err() when ctx ends first. Sent while the
// function runs, it is answered before the RELEASE that follows.
func (h *keyHold) sendNote(text string) func(ctx context.Context) error {
	cl := h.conn.request("NOTE", strconv.FormatInt(h.state.id, 10), text)
	return func(ctx context.Context) error {
		select {
		case r := <-cl.reply:
			switch {
			case r.err != nil:
				if lost := h.state.check(); lost != nil {
					return lost
				}
				if r.err == errShutStoreClosed {
					return errLostStoreClosed(h.lock, h.key)
				}
				return errLostConnection(h.lock, h.key, r.err)
			case r.v.isError():
				refused := fromReply(r.v.text, h.lock, h.key)
				if refused.Kind == KindLost {
					h.state.lose(refused)
					return h.state.check()
				}
				return refused
			}
			return nil
		case <-h.state.lostCh:
			return h.state.check()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
