package locks

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"
)

// errPoolClosed: the store was closed before a connection could be had.
var errPoolClosed = errors.New("the store is closed")

// pool keeps the store's connections. The server carries out one
// connection's commands one at a time, so a HOLD waiting on a shared
// connection would hold up every command behind it: each hold has a
// connection of its own from its HOLD to its RELEASE, and connections are
// kept for the next hold once their hold is over (up to maxIdle of them).
type pool struct {
	addr     address
	auth     *credentials // nil: HELLO 3 without AUTH
	timeout  time.Duration
	maxIdle  int
	maxReply int
	tls      *tls.Config // nil: plain TCP

	mu     sync.Mutex
	idle   []*conn // the most recently used last
	all    map[*conn]struct{}
	closed bool
	// onFail is told when one of the pool's connections fails (cluster
	// mode: the map is refreshed).
	onFail func()
}

// connectConfig is what Connect's options set, for every pool.
type connectConfig struct {
	token    string
	useToken bool
	user     string
	useUser  bool
	// auth is what token and user come to (resolveAuth).
	auth     *credentials
	timeout  time.Duration
	maxIdle  int
	maxReply int
	tls      *tls.Config
}

// resolveAuth sets cfg.auth: the User option's name, else the first
// address's, else default; with the token (Token's, else the address's),
// nil without one. A bad User name, or a user without a token, is an
// error.
func (cfg *connectConfig) resolveAuth(first address) *Error {
	if cfg.useUser && !isUserName(cfg.user) {
		return errBadUser(cfg.user)
	}
	user := first.user
	if cfg.useUser {
		user = cfg.user
	}
	switch {
	case cfg.useToken && user == "":
		cfg.auth = &credentials{user: "default", token: cfg.token}
	case cfg.useToken:
		cfg.auth = &credentials{user: user, token: cfg.token}
	case user != "":
		return errUserWithoutToken(user)
	}
	return nil
}

// newPool makes the pool of the server at a with the store's settings.
// An empty ServerName in the TLS config is a's host.
func newPool(a address, cfg *connectConfig) *pool {
	p := &pool{
		addr: a, auth: cfg.auth,
		timeout: cfg.timeout, maxIdle: cfg.maxIdle, maxReply: cfg.maxReply, all: map[*conn]struct{}{},
	}
	if cfg.tls != nil {
		p.tls = cfg.tls.Clone()
		if p.tls.ServerName == "" {
			p.tls.ServerName = a.host
		}
	}
	return p
}

// setOnFail has fn told of every failed connection of the pool, those
// open already too.
func (p *pool) setOnFail(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onFail = fn
	for c := range p.all {
		c.setOnFail(fn)
	}
}

// get answers a free connection, opening one when none is free.
func (p *pool) get(ctx context.Context) (*conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if c.deadReason() == nil {
			p.mu.Unlock()
			return c, nil
		}
		delete(p.all, c)
	}
	p.mu.Unlock()
	c, err := dial(ctx, p.addr, p.tls, p.auth, p.timeout, p.maxReply)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.close(errShutStoreClosed)
		return nil, errPoolClosed
	}
	p.all[c] = struct{}{}
	if p.onFail != nil {
		c.setOnFail(p.onFail)
	}
	return c, nil
}

// put takes back a connection whose hold is over, keeping it for the next
// unless it died or enough are kept.
func (p *pool) put(c *conn) {
	c.idle()
	p.mu.Lock()
	if c.deadReason() != nil || p.closed || len(p.idle) >= p.maxIdle {
		delete(p.all, c)
		p.mu.Unlock()
		c.close(errShutAbandoned)
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// discard closes a connection for reason and forgets it.
func (p *pool) discard(c *conn, reason error) {
	c.close(reason)
	p.mu.Lock()
	delete(p.all, c)
	p.mu.Unlock()
}

// close closes every connection, in use or not; later gets fail.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	all := p.all
	p.all, p.idle = map[*conn]struct{}{}, nil
	p.mu.Unlock()
	for c := range all {
		c.close(errShutStoreClosed)
	}
}

func (p *pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// ask sends args on c, a connection of p, and waits for its answer at
// most p.timeout. A connection abandoned (ctx done) or silent is
// discarded and that error answered; otherwise the answer is the
// caller's, and so is c.
func (p *pool) ask(ctx context.Context, c *conn, args ...string) (result, error) {
	cl := c.request(args...)
	silent := time.NewTimer(p.timeout)
	defer silent.Stop()
	select {
	case r := <-cl.reply:
		return r, nil
	case <-ctx.Done():
		p.discard(c, errShutAbandoned)
		return result{}, ctx.Err()
	case <-silent.C:
		p.discard(c, errShutSilent)
		return result{}, errConnectSilent(p.addr.hostPort(), p.timeout)
	}
}
