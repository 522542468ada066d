package locks

import (
	"context"
	"time"
)

// Store is a connection to one holdline server: open locks on it with
// OpenLock. It is safe for use by many goroutines at once; each hold in
// flight uses a connection of its own from a small pool. Close it when
// done (defer store.Close()).
type Store struct {
	pool *pool
}

// ConnectOption configures Connect.
type ConnectOption func(*connectConfig)

type connectConfig struct {
	token    string
	useToken bool
	timeout  time.Duration
	maxIdle  int
}

// Token is the server's token (holdline serve --token-file). It wins over
// a token in a redis:// address.
func Token(token string) ConnectOption {
	return func(c *connectConfig) { c.token, c.useToken = token, true }
}

// DialTimeout bounds opening a connection and the server's answer to its
// HELLO (10s unless given).
func DialTimeout(d time.Duration) ConnectOption {
	return func(c *connectConfig) { c.timeout = d }
}

// MaxIdleConns is how many connections are kept open for the next holds
// while no hold uses them (8 unless given). Holds in flight use as many
// connections as there are holds, whatever this says.
func MaxIdleConns(n int) ConnectOption {
	return func(c *connectConfig) { c.maxIdle = n }
}

// Connect connects to holdline serve at addr: "host:port", "host" (port
// 7380), "[::1]:7380" or "redis://[:token@]host[:port]". It opens a first
// connection and says HELLO, so a wrong address, an unreachable server or
// a wrong or missing token fails here (a bad address with kind
// KindInvalid before anything is tried; an unreachable server
// KindClosed; a token wanted or refused KindInvalid). A ctx that ends
// first answers ctx.Err().
func Connect(ctx context.Context, addr string, opts ...ConnectOption) (*Store, error) {
	a, bad := parseAddress(addr)
	if bad != nil {
		return nil, bad
	}
	cfg := connectConfig{token: a.token, useToken: a.hasToken, timeout: 10 * time.Second, maxIdle: 8}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = 10 * time.Second
	}
	p := &pool{
		addr: a, token: cfg.token, useToken: cfg.useToken,
		timeout: cfg.timeout, maxIdle: cfg.maxIdle, all: map[*conn]struct{}{},
	}
	first, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	p.put(first)
	return &Store{pool: p}, nil
}

// Close closes every connection: holds still waiting answer kind
// KindClosed, leases still held are lost ("its store closed": their
// functions' contexts end) and the server lets their keys go; every later
// call answers KindClosed. Closing twice is harmless; it answers nil.
func (s *Store) Close() error {
	s.pool.close()
	return nil
}
