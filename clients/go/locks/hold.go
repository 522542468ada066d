package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
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

	// secret: what the hold sends as SECRET to a node that can hand
	// leases over (HELLO's handover = 1), and re-attaches with after it
	// did: 32 hex digits from the system's random source, new per hold.
	secret string
	// sentSecret: the last HOLD or TRYHOLD sent carried the secret (or
	// was a REATTACH).
	sentSecret bool

	state *leaseState

	mu   sync.Mutex
	pool *pool // the key's node's (after a re-attach, the new node's)
	conn *conn
	// following is closed when the re-attach in flight ends; nil when
	// none was started.
	following chan struct{}
	// dropped: the hold ended without its RELEASE (its function
	// panicked): a re-attach that succeeds after it lets the lease go.
	dropped bool
}

// current answers the connection the lease is held on now, and its pool.
func (h *keyHold) current() (*pool, *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pool, h.conn
}

// newSecret is 32 lowercase hex digits from the system's random source.
func newSecret() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("holdline: the system's random source failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// withSecret answers the HOLD or TRYHOLD args to send on c: with SECRET
// when c's node can hand leases over, else as they are.
func (h *keyHold) withSecret(c *conn, args []string) []string {
	if !c.handover || (args[0] != "HOLD" && args[0] != "TRYHOLD") {
		return args
	}
	if h.secret == "" {
		h.secret = newSecret()
	}
	return append(append([]string(nil), args...), "SECRET", h.secret)
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
	hold := args
	for sent := 0; ; sent++ {
		if bctx.Err() != nil {
			return false, h.ended(ctx, b)
		}
		if sent > 0 && args[0] != "REATTACH" {
			args = b.waitLeft(args)
		}
		granted, err := h.askOnce(ctx, bctx, args, b, &t)
		if args[0] == "REATTACH" && nothingUnderSecret(err) {
			// Nothing under the secret at the node the MOVED named: that
			// MOVED was a plain redirection (the map was stale), or the
			// transfer failed. Either way the hold is not in a line: it
			// asks again there, with the wait left.
			p, _ := h.current()
			args, t.next = hold, p.addr.hostPort()
			continue
		}
		if args[0] == "REATTACH" && errors.Is(err, ErrClosed) && bctx.Err() == nil && !h.store.isClosed() {
			// The node named cannot be reached, or its connection closed
			// under the REATTACH (a MOVED may name the old node until the
			// new one serves): after a pause, the map (refreshed without
			// it) says where to ask.
			t.next = ""
			if pauseFor(bctx, clusterDownPause) != nil {
				return false, h.ended(ctx, b)
			}
			continue
		}
		rd, ok := err.(redirect)
		if !ok {
			return granted, err
		}
		if args[0] == "HOLD" && h.sentSecret && !isClusterDown(string(rd)) && b.wait > 0 {
			// A HOLD that waited with a secret, answered MOVED: its node
			// handed its line over (or the HOLD reached the wrong node);
			// it re-attaches there to keep its place.
			args = []string{"REATTACH", h.lock, h.key, h.secret}
		}
		if err := h.store.router.follow(bctx, h.lock, h.key, rd, &t); err != nil {
			if bctx.Err() != nil {
				return false, h.ended(ctx, b)
			}
			return false, err
		}
	}
}

// nothingUnderSecret: err is the LOST answer of a REATTACH that found
// nothing handed over under its secret (not a grant lost afterwards).
func nothingUnderSecret(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindLost && strings.HasSuffix(e.text, "nothing was handed over under its secret")
}

// pauseFor waits d, or until ctx ends (its error).
func pauseFor(ctx context.Context, d time.Duration) error {
	pause := time.NewTimer(d)
	defer pause.Stop()
	select {
	case <-pause.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
	h.mu.Lock()
	h.pool, h.conn = p, c
	h.mu.Unlock()
	h.state = c.newLease(h.lock, h.key, h.ttl)
	args = h.withSecret(c, args)
	h.sentSecret = args[0] == "REATTACH" || args[len(args)-2] == "SECRET"
	if h.sentSecret {
		h.state.onMoved = h.startFollow
	}
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
	_, c := h.current()
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
	_, c := h.current()
	cl := &call{reply: make(chan result, 1), renew: h.state, confirms: h.state}
	c.send(cl, "RENEW", strconv.FormatInt(h.state.leaseID(), 10))
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
			h.mu.Lock()
			h.dropped = true
			p, c := h.pool, h.conn
			h.mu.Unlock()
			p.discard(c, errShutAbandoned)
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
// answer to RELEASE is a loss whose news had not come yet. A lease that
// is re-attaching is released where it re-attaches, once it has; one
// whose RELEASE answers MOVED (it moved just then) re-attaches first, to
// be released there.
func (h *keyHold) release() *Error {
	lost := h.state.end()
	for round := 0; ; round++ {
		h.waitFollow()
		p, c := h.current()
		c.idle()
		if c.deadReason() != nil || h.state.isMoving() {
			// Dead, or the lease never re-attached: nothing to let go
			// here (the new node lets it go at its deadline).
			p.discard(c, errShutAbandoned)
			return lost
		}
		cl := c.request("RELEASE", strconv.FormatInt(h.state.leaseID(), 10))
		silent := time.NewTimer(waitGrace(h.ttl))
		select {
		case r := <-cl.reply:
			silent.Stop()
			switch {
			case r.err != nil:
				p.discard(c, r.err)
			case !r.v.isError():
				p.put(c)
			case r.v.text[:min(len(r.v.text), 5)] == "LOST ":
				if lost == nil {
					lost = fromReply(r.v.text, h.lock, h.key)
				}
				p.put(c)
			default:
				if _, node, ok := parseMoved(r.v.text); ok && round == 0 {
					if h.state.moved(node); h.state.isMoving() {
						continue
					}
				}
				p.discard(c, errShutAbandoned)
			}
		case <-silent.C:
			// The server lets the key go when it sees the connection close.
			p.discard(c, errShutSilent)
		}
		return lost
	}
}

// startFollow is the lease's onMoved: told it moved to node, it
// re-attaches there in the background (see follow).
func (h *keyHold) startFollow(node string) {
	done := make(chan struct{})
	h.mu.Lock()
	h.following = done
	h.mu.Unlock()
	go h.follow(node, done)
}

// waitFollow waits for the re-attach in flight, if any, to end.
func (h *keyHold) waitFollow() {
	h.mu.Lock()
	done := h.following
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// follow re-attaches a lease that moved to node: REATTACH lock key secret
// there, following MOVED, pausing after CLUSTERDOWN or a failed
// connection, until the lease's deadline. Its answer [lease, fence]
// re-attaches the lease on that connection (the reader does so, see
// conn.attach), which renews it from then on; the old connection is
// closed. Its deadline passing first, or any other answer (LOST: nothing
// under the secret), loses it reattach_failed.
func (h *keyHold) follow(node string, done chan struct{}) {
	defer close(done)
	r := h.store.router
	moved := 0
	for {
		left := h.state.untilDeadline()
		if left <= 0 || r == nil {
			h.state.lose(errReattachFailed(h.lock, h.key))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		next, again := h.reattachAt(ctx, r, node)
		cancel()
		if again == followDone {
			return
		}
		if next != "" {
			node = next
		}
		if again == followMoved {
			if moved++; moved <= maxRedirects {
				continue
			}
		}
		// A CLUSTERDOWN (the partition between owners), a failed
		// connection, or MOVED after MOVED: pause, then ask again.
		pause := clusterDownPause
		if left := h.state.untilDeadline(); left < pause {
			pause = left
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

// What one REATTACH came to (see reattachAt).
const (
	followDone  = iota // re-attached, or given up (the lease lost)
	followMoved        // MOVED: ask the node it names
	followPause        // CLUSTERDOWN, or the connection failed: pause, ask again (the node answered, if not "")
)

// reattachAt sends REATTACH to node and reads its answer within ctx; it
// answers what came of it, and the node to ask next.
func (h *keyHold) reattachAt(ctx context.Context, r *router, node string) (string, int) {
	p, err := r.poolOf(node)
	if err == errPoolClosed {
		h.state.lose(errLostStoreClosed(h.lock, h.key))
		return "", followDone
	}
	c, err := p.get(ctx)
	switch {
	case err == errPoolClosed:
		h.state.lose(errLostStoreClosed(h.lock, h.key))
		return "", followDone
	case err != nil:
		// The node named cannot be reached: ask the map (refreshed
		// without it) who serves the key now.
		r.refresh(ctx, node)
		return r.nodeFor(h.key), followPause
	}
	cl := &call{reply: make(chan result, 1), reattach: h.state}
	c.send(cl, "REATTACH", h.lock, h.key, h.secret)
	var res result
	select {
	case res = <-cl.reply:
	case <-ctx.Done():
		// The lease's deadline passed first: closing the connection lets
		// go whatever the node grants it.
		p.discard(c, errShutSilent)
		h.state.lose(errReattachFailed(h.lock, h.key))
		return "", followDone
	}
	switch {
	case res.err == errShutStoreClosed:
		p.discard(c, res.err)
		h.state.lose(errLostStoreClosed(h.lock, h.key))
		return "", followDone
	case res.err != nil:
		p.discard(c, res.err)
		return node, followPause
	case cl.attached:
		h.mu.Lock()
		oldPool, old, dropped := h.pool, h.conn, h.dropped
		if !dropped {
			h.pool, h.conn = p, c
		}
		h.mu.Unlock()
		if dropped {
			p.discard(c, errShutAbandoned)
			return "", followDone
		}
		c.renewFor(h.ttl)
		oldPool.discard(old, errShutAbandoned)
		return "", followDone
	case res.v.isError():
		if slot, next, ok := parseMoved(res.v.text); ok {
			p.put(c)
			r.noteMoved(slot, next)
			return next, followMoved
		}
		if isClusterDown(res.v.text) {
			p.put(c)
			return node, followPause
		}
		p.put(c)
	default:
		// A grant not taken (the lease lost meanwhile, its deadline
		// passed, or another fence): closing the connection lets it go.
		p.discard(c, errShutAbandoned)
	}
	h.state.lose(errReattachFailed(h.lock, h.key))
	return "", followDone
}

// sendNote sends NOTE for the lease, and answers what waits for the
// server's answer: nil once the note is taken, the server's KindInvalid
// for a bad note, the lost error when the lease is lost first (a LOST
// answer loses it), ctx.Err() when ctx ends first. Sent while the
// function runs, it is answered before the RELEASE that follows.
func (h *keyHold) sendNote(text string) func(ctx context.Context) error {
	_, c := h.current()
	cl := c.request("NOTE", strconv.FormatInt(h.state.leaseID(), 10), text)
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
