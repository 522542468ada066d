package locks

import (
	"context"
	"crypto/tls"
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
	tls      *tls.Config
}

// Token is the server's token (holdline serve --token-file). It wins over
// a token in a redis:// address.
func Token(token string) ConnectOption {
	return func(c *connectConfig) { c.token, c.useToken = token, true }
}

// TLS makes every connection TLS with config, whatever the address's form
// (a rediss:// address without it uses the system's trusted CAs). Give
// the server's CA in config.RootCAs, and a client certificate in
// config.Certificates when the server wants one (holdline serve
// --tls-client-ca). config.ServerName, when empty, is the address's host.
// The config is cloned: changing it later changes nothing here.
func TLS(config *tls.Config) ConnectOption {
	return func(c *connectConfig) {
		if config == nil {
			c.tls = nil
		} else {
			c.tls = config.Clone()
		}
	}
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
// 7380), "[::1]:7380", "redis://[:token@]host[:port]", or the same with
// rediss:// for TLS. It opens a first connection and says HELLO, so a
// wrong address, an unreachable server, a failed TLS handshake or a wrong
// or missing token fails here (a bad address with kind KindInvalid before
// anything is tried; an unreachable server or a failed handshake
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
	if cfg.tls == nil && a.tls {
		cfg.tls = &tls.Config{}
	}
	if cfg.tls != nil && cfg.tls.ServerName == "" {
		cfg.tls.ServerName = a.host
	}
	p := &pool{
		addr: a, token: cfg.token, useToken: cfg.useToken,
		timeout: cfg.timeout, maxIdle: cfg.maxIdle, tls: cfg.tls, all: map[*conn]struct{}{},
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
