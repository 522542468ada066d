package locks

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Why a connection was closed by this client. A connection is never
// reused after it closed: a new socket would hold none of its leases.
var (
	errShutStoreClosed = errors.New("the store was closed")
	errShutAbandoned   = errors.New("the hold was given up")
	errShutSilent      = errors.New("the server answered nothing in time")
)

// errSpeaksTLS: a plain connection's first bytes from the server are a
// TLS record (a TLS server answers plain text with an alert).
var errSpeaksTLS = errors.New("the server speaks TLS: connect with rediss:// or locks.TLS")

// writeTimeout bounds one write: a server that reads nothing for this
// long is taken for gone.
const writeTimeout = 10 * time.Second

// conn is one connection to the server. Commands are answered in the
// order they were written; a reader goroutine hands each reply to its
// command, reads the server's pushes (which may come between any two
// replies), and notices the connection's end. While a hold uses the
// connection it renews (see renewFor), and the lease held on it is told of
// every reply (see leaseState).
type conn struct {
	nc     net.Conn // a *tls.Conn over TLS
	br     *bufio.Reader
	tls    bool
	closed chan struct{}
	// handover: the node said handover = 1 in HELLO: it can hand leases
	// over to another node, so holds send it a SECRET to re-attach with.
	handover bool
	// maxReply is the largest reply taken (MaxReplyBytes).
	maxReply int

	wmu sync.Mutex // one write at a time, in the order of pending

	mu         sync.Mutex
	pending    []*call     // written, not answered yet, oldest first
	lease      *leaseState // the lease held here, from its grant
	early      *Error      // a loss pushed before its grant was read
	earlyID    int64
	renewEvery time.Duration
	renewGen   uint64 // a new one per renewFor and idle, to stop old timers
	renewTimer *time.Timer
	lastWrite  int64
	dead       error
	// onFail is told when the connection fails (not when this client
	// closes it): in cluster mode the map is refreshed.
	onFail func()
	// observed is told of every ["observe", ...] push, on a connection
	// an election observes on (see Election.Observe); nil elsewhere.
	observed func(v value)
}

// call is one command written and what to do with its reply.
type call struct {
	sent  int64
	reply chan result // buffered; nil when nobody waits for the reply
	grant *leaseState // HOLD or TRYHOLD: a grant registers this lease
	renew *leaseState // RENEW: a LOST answer loses this lease
	// confirms: the RENEW of a late grant; OK starts the lease from its
	// send time.
	confirms *leaseState
	// reattach: REATTACH of a lease that moved; its grant re-attaches
	// this lease here (see attach).
	reattach *leaseState
	// attached: set by the reader before the reply is handed over, when
	// reattach's grant re-attached the lease here.
	attached bool
}

// result is a reply, or the reason the connection ended before it came.
type result struct {
	v   value
	err error
}

// credentials is what a connection says in HELLO 3 AUTH USER TOKEN.
type credentials struct {
	user, token string
}

// dial opens a connection (TLS given tlsConfig) and says HELLO 3 (with
// AUTH USER TOKEN given auth); timeout bounds all of it. A failed
// handshake, a server that wants a token, or refuses it, fails here.
func dial(ctx context.Context, a address, tlsConfig *tls.Config, auth *credentials, timeout time.Duration, maxReply int) (*conn, error) {
	start := time.Now()
	nc, err := open(ctx, a, tlsConfig, timeout)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReader(nc), tls: tlsConfig != nil, maxReply: maxReply, closed: make(chan struct{})}
	go c.readLoop()
	hello := []string{"HELLO", "3"}
	if auth != nil {
		hello = append(hello, "AUTH", auth.user, auth.token)
	}
	cl := c.request(hello...)
	timer := time.NewTimer(timeout - time.Since(start))
	defer timer.Stop()
	select {
	case r := <-cl.reply:
		if err := helloAnswer(c, a, r); err != nil {
			return c, err
		}
		c.handover = helloNumber(r.v, "handover") == 1
		return c, nil
	case <-ctx.Done():
		c.close(errShutAbandoned)
		return nil, ctx.Err()
	case <-timer.C:
		c.close(errShutSilent)
		return nil, errConnectSilent(a.hostPort(), timeout)
	}
}

// open dials, and shakes hands given tlsConfig, within timeout.
func open(ctx context.Context, a address, tlsConfig *tls.Config, timeout time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", a.hostPort())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errCannotConnect(a.hostPort(), err)
	}
	if tlsConfig == nil {
		return nc, nil
	}
	tc := tls.Client(nc, tlsConfig)
	if err := tc.HandshakeContext(dctx); err != nil {
		_ = nc.Close()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case dctx.Err() != nil:
			return nil, errConnectSilent(a.hostPort(), timeout)
		}
		return nil, errTLSFailed(a.hostPort(), err)
	}
	return tc, nil
}

// helloAnswer: nil for a welcome, else the error (and c closed).
func helloAnswer(c *conn, a address, r result) error {
	switch {
	case r.err == errSpeaksTLS, c.tls && isTLSAlert(r.err):
		// Under TLS 1.3 a server that refuses this client's certificate
		// (or its lack of one) says so after the handshake, as an alert.
		return errTLSFailed(a.hostPort(), r.err)
	case r.err != nil:
		var notResp errNotResp
		var tooLarge errTooLarge
		switch {
		case errors.As(r.err, &notResp):
			return errNotRESP(a.hostPort(), notResp.head)
		case errors.As(r.err, &tooLarge):
			return errReplyTooLarge(a.hostPort(), tooLarge.size, c.maxReply)
		}
		return errConnectionClosed(r.err)
	case !r.v.isError():
		if err := notHoldline(a.hostPort(), r.v); err != nil {
			c.close(errShutAbandoned)
			return err
		}
		return nil
	}
	c.close(errShutAbandoned)
	switch word, _, _ := strings.Cut(r.v.text, " "); word {
	case "NOAUTH":
		return errTokenMissing()
	case "WRONGPASS":
		return errTokenRefused()
	}
	return errConnectRefused(a.hostPort(), r.v.text)
}

// notHoldline: nil when HELLO's answer (a map, or RESP2's flat array)
// names holdline as its server, else not_holdline with the name and
// version it gave.
func notHoldline(hostport string, hello value) error {
	field := func(name string) (string, bool) {
		if hello.kind != '%' && hello.kind != '*' {
			return "", false
		}
		for i := 0; i+1 < len(hello.items); i += 2 {
			k, v := hello.items[i], hello.items[i+1]
			if k.text == name && isText(k) && isText(v) {
				return v.text, true
			}
		}
		return "", false
	}
	server, named := field("server")
	switch {
	case named && server == "holdline":
		return nil
	case !named:
		return errNotHoldline(hostport, "")
	}
	if version, ok := field("version"); ok {
		server += " " + version
	}
	return errNotHoldline(hostport, server)
}

// helloNumber answers the integer field name of HELLO's answer (a map,
// or RESP2's flat array), 0 when it has none.
func helloNumber(hello value, name string) int64 {
	if hello.kind != '%' && hello.kind != '*' {
		return 0
	}
	for i := 0; i+1 < len(hello.items); i += 2 {
		if k, v := hello.items[i], hello.items[i+1]; k.text == name && isText(k) && v.kind == ':' {
			return v.num
		}
	}
	return 0
}

// isText: a string frame (bulk, simple or verbatim), not null.
func isText(v value) bool {
	return (v.kind == '$' || v.kind == '+' || v.kind == '=') && !v.null
}

// request writes a command whose reply the caller waits for.
func (c *conn) request(args ...string) *call {
	cl := &call{reply: make(chan result, 1)}
	c.send(cl, args...)
	return cl
}

// send writes a command. A failed write closes the connection, which
// answers every command in flight with the reason.
func (c *conn) send(cl *call, args ...string) {
	frame := appendCommand(make([]byte, 0, 64), args...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.dead != nil {
		dead := c.dead
		c.mu.Unlock()
		if cl.reply != nil {
			cl.reply <- result{err: dead}
		}
		return
	}
	// The send time is taken before the write: the server reads the
	// command no sooner, so a lease deadline counted from it is safe.
	cl.sent = monoNow()
	c.lastWrite = cl.sent
	c.pending = append(c.pending, cl)
	c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(frame); err != nil {
		c.close(err)
	}
}

// readLoop reads until the connection ends.
func (c *conn) readLoop() {
	if !c.tls {
		// Every reply is longer than two bytes.
		if b, err := c.br.Peek(2); err == nil && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03 {
			c.close(errSpeaksTLS)
			return
		}
	}
	for {
		v, err := readValue(c.br, c.maxReply)
		if err == nil {
			if v.kind == '>' {
				c.onPush(v)
				continue
			}
			err = c.onReply(v)
		}
		if err != nil {
			c.close(err)
			return
		}
	}
}

// onReply hands a reply to the oldest command in flight.
func (c *conn) onReply(v value) error {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return errProtocol{"a reply to no command"}
	}
	cl := c.pending[0]
	c.pending[0] = nil
	c.pending = c.pending[1:]
	ls := c.lease
	c.mu.Unlock()
	if cl.renew != nil && v.isError() {
		// MOVED: the lease moved before the node read this RENEW, which
		// renewed nothing here.
		if _, node, ok := parseMoved(v.text); ok && c.movedAway(cl.renew, node) {
			ls = nil
		}
	}
	if ls != nil {
		ls.confirm(cl.sent)
	}
	if cl.renew != nil && v.isError() && strings.HasPrefix(v.text, "LOST ") {
		cl.renew.lose(fromReply(v.text, cl.renew.lock, cl.renew.key))
	}
	if cl.reattach != nil {
		cl.attached = c.attach(cl.reattach, v, cl.sent)
	}
	if cl.confirms != nil && !v.isError() {
		cl.confirms.confirmedBy(cl.sent)
	}
	if cl.grant != nil {
		c.register(cl.grant, v, cl.sent)
	}
	if cl.reply != nil {
		cl.reply <- result{v: v}
	}
	return nil
}

// register makes a grant, to a HOLD or TRYHOLD sent at sent, the lease of
// this connection. A reply that is not a grant ([lease, fence]) registers
// nothing: the holder reads it.
func (c *conn) register(ls *leaseState, v value, sent int64) {
	id, fence, ok := grantOf(v)
	if !ok {
		return
	}
	c.mu.Lock()
	c.lease = ls
	early := c.early
	if c.earlyID != id {
		early = nil
	}
	c.early = nil
	c.mu.Unlock()
	ls.granted(id, fence, sent)
	if early != nil {
		ls.lose(early)
	}
}

// attach makes a grant to REATTACH, sent at sent, the lease of this
// connection under the grant's new id; true when it did. The fence must
// be the lease's own; a lease lost meanwhile, or past its deadline, is
// not attached (its holder lets the new lease go).
func (c *conn) attach(ls *leaseState, v value, sent int64) bool {
	id, fence, ok := grantOf(v)
	if !ok || fence != ls.fence || !ls.reattached(id, sent, func() { c.close(errShutSilent) }) {
		return false
	}
	c.mu.Lock()
	c.lease = ls
	early := c.early
	if c.earlyID != id {
		early = nil
	}
	c.early = nil
	c.mu.Unlock()
	if early != nil {
		ls.lose(early)
	}
	return true
}

// movedAway: the node said ls, held here, moved to node. A lease held
// with a secret leaves the connection (no renewal, no reply counts for
// it from now on, its end is not the lease's) and re-attaches there;
// true then. One without (which no node moves) stays as it is.
func (c *conn) movedAway(ls *leaseState, node string) bool {
	if !ls.canMove() {
		return false
	}
	c.mu.Lock()
	if c.lease == ls {
		c.lease = nil
		c.stopRenewalLocked()
	}
	c.mu.Unlock()
	ls.moved(node)
	return true
}

// grantOf reads a grant: an array of two integers, lease and fence.
func grantOf(v value) (id int64, fence uint64, ok bool) {
	if v.kind != '*' || len(v.items) != 2 || v.items[0].kind != ':' || v.items[1].kind != ':' || v.items[1].num < 0 {
		return 0, 0, false
	}
	return v.items[0].num, uint64(v.items[1].num), true
}

// onPush: ["lost", lease, text] loses that lease; ["moved", lease, slot,
// "host:port"] has it re-attach there (see movedAway); ["observe", ...]
// goes to the connection's observer; other pushes mean nothing to a
// holder.
func (c *conn) onPush(v value) {
	if len(v.items) > 0 && strings.EqualFold(v.items[0].text, "observe") {
		c.mu.Lock()
		observed := c.observed
		c.mu.Unlock()
		if observed != nil {
			observed(v)
		}
		return
	}
	if len(v.items) == 4 && strings.EqualFold(v.items[0].text, "moved") && v.items[1].kind == ':' {
		_, node, ok := parseMoved("MOVED 0 " + v.items[3].text)
		c.mu.Lock()
		ls := c.lease
		c.mu.Unlock()
		if ok && ls != nil && ls.leaseID() == v.items[1].num {
			c.movedAway(ls, node)
		}
		return
	}
	if len(v.items) != 3 || !strings.EqualFold(v.items[0].text, "lost") || v.items[1].kind != ':' {
		return
	}
	id, text := v.items[1].num, v.items[2].text
	c.mu.Lock()
	ls := c.lease
	if ls == nil || ls.leaseID() != id {
		c.early, c.earlyID = &Error{Kind: KindLost, text: text}, id
		ls = nil
	}
	c.mu.Unlock()
	if ls != nil {
		ls.lose(&Error{Kind: KindLost, Lock: ls.lock, Key: ls.key, text: text})
	}
}

// close ends the connection for reason (the first reason stays): every
// command in flight is answered with it, and the lease held here, if
// any, is lost. The server lets a closed connection's keys go at once and
// takes its waiting HOLD out of the line.
func (c *conn) close(reason error) {
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return
	}
	c.dead = reason
	pending := c.pending
	c.pending = nil
	ls := c.lease
	onFail := c.onFail
	c.stopRenewalLocked()
	c.mu.Unlock()
	close(c.closed)
	_ = c.nc.Close()
	if onFail != nil && reason != errShutStoreClosed && reason != errShutAbandoned {
		onFail()
	}
	for _, cl := range pending {
		if cl.reply != nil {
			cl.reply <- result{err: reason}
		}
	}
	if ls != nil {
		if reason == errShutStoreClosed {
			ls.lose(errLostStoreClosed(ls.lock, ls.key))
		} else {
			ls.lose(errLostConnection(ls.lock, ls.key, reason))
		}
	}
}

// setObserved has fn told of the connection's observe pushes, in the
// order they come; fn runs on the reader, so nothing is read meanwhile.
func (c *conn) setObserved(fn func(v value)) {
	c.mu.Lock()
	c.observed = fn
	c.mu.Unlock()
}

func (c *conn) setOnFail(fn func()) {
	c.mu.Lock()
	c.onFail = fn
	c.mu.Unlock()
}

// deadReason answers why the connection ended, or nil while it lives.
func (c *conn) deadReason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// newLease makes the state of a lease to be asked for on this connection:
// lost by the clock, it closes the connection.
func (c *conn) newLease(lock, key string, ttl time.Duration) *leaseState {
	return newLeaseState(lock, key, ttl, func() { c.close(errShutSilent) })
}

// renewFor keeps the connection talking every third of ttl from now on:
// PING while a HOLD waits (the server reads it, which renews, although its
// reply comes after the HOLD's), RENEW once a lease has its deadline (its
// LOST answer is a second way to learn of a loss).
func (c *conn) renewFor(ttl time.Duration) {
	every := ttl / 3
	if every < time.Millisecond {
		every = time.Millisecond
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopRenewalLocked()
	if c.dead != nil {
		return
	}
	c.renewEvery = every
	gen := c.renewGen
	c.renewTimer = time.AfterFunc(every, func() { c.renewTick(gen) })
}

func (c *conn) renewTick(gen uint64) {
	c.mu.Lock()
	if c.dead != nil || gen != c.renewGen {
		c.mu.Unlock()
		return
	}
	if due := time.Duration(c.lastWrite + int64(c.renewEvery) - monoNow()); due > 0 {
		// Something else was written meanwhile, which renews as well.
		c.renewTimer = time.AfterFunc(due, func() { c.renewTick(gen) })
		c.mu.Unlock()
		return
	}
	ls := c.lease
	c.mu.Unlock()
	cl := &call{}
	switch {
	case ls == nil || !ls.isStarted():
		c.send(cl, "PING")
	case ls.check() == nil:
		cl.renew = ls
		c.send(cl, "RENEW", strconv.FormatInt(ls.leaseID(), 10))
	}
	c.mu.Lock()
	if c.dead == nil && gen == c.renewGen {
		c.renewTimer = time.AfterFunc(c.renewEvery, func() { c.renewTick(gen) })
	}
	c.mu.Unlock()
}

func (c *conn) stopRenewalLocked() {
	c.renewGen++
	if c.renewTimer != nil {
		c.renewTimer.Stop()
		c.renewTimer = nil
	}
}

// idle: the hold using the connection is over; no renewal, no lease.
func (c *conn) idle() {
	c.mu.Lock()
	c.stopRenewalLocked()
	c.lease, c.early = nil, nil
	c.mu.Unlock()
}
