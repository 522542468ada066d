package locks

import (
	"context"
	"crypto/tls"
	"strings"
	"time"
)

// Store is a connection to holdline: one server, or the nodes of a
// cluster (each key's commands go to the node that serves its slot). Open
// locks on it with OpenLock. It is safe for use by many goroutines at
// once; each hold in flight uses a connection of its own from a small pool
// (one pool per node). Close it when done (defer store.Close()).
type Store struct {
	pool   *pool   // the server Connect reached
	router *router // nil for a single server
}

// ConnectOption configures Connect.
type ConnectOption func(*connectConfig)

// Token is the server's token (holdline serve --token-file), or the
// user's (--users). It wins over a token in a redis:// address.
func Token(token string) ConnectOption {
	return func(c *connectConfig) { c.token, c.useToken = token, true }
}

// User is the user to connect as, on a server started with --users (1 to
// 64 ASCII letters, digits or "_-.:@"; without it, the user of a
// redis://USER:TOKEN@host address, else default). It wins over the
// address's user. It needs a token, from Token or the address: HELLO 3
// AUTH USER TOKEN is said. Connect fails with kind KindInvalid for a name
// outside that rule, or a user without a token. A command naming a lock
// the user may not use fails with an error that matches both ErrNoPerm
// and ErrInvalid.
func User(name string) ConnectOption {
	return func(c *connectConfig) { c.user, c.useUser = name, true }
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
// HELLO (10s unless given): a server silent for that long fails Connect
// with KindClosed ("store: the server at HOST:PORT answered nothing for
// 10s: closed").
func DialTimeout(d time.Duration) ConnectOption {
	return func(c *connectConfig) { c.timeout = d }
}

// MaxReplyBytes is the largest reply a connection takes (64 MiB,
// DefaultMaxReplyBytes, unless given; n < 1 keeps the default). A reply
// whose header announces more ends its connection at once, before any of
// it is read ("store: the server at HOST:PORT announced a reply of N
// bytes, over the limit of LIMIT: closed", KindClosed); at Connect,
// Connect fails so.
func MaxReplyBytes(n int) ConnectOption {
	return func(c *connectConfig) { c.maxReply = n }
}

// MaxIdleConns is how many connections are kept open for the next holds
// while no hold uses them (8 unless given). Holds in flight use as many
// connections as there are holds, whatever this says.
func MaxIdleConns(n int) ConnectOption {
	return func(c *connectConfig) { c.maxIdle = n }
}

// Connect connects to holdline serve at addr: "host:port", "host" (port
// 7380), "[::1]:7380", "redis://[[user]:token@]host[:port]", or the same
// with rediss:// for TLS. It opens a first connection and says HELLO, so a
// wrong address, an unreachable server, a failed TLS handshake or a wrong
// or missing token fails here (a bad address with kind KindInvalid before
// anything is tried; an unreachable server or a failed handshake
// KindClosed; a token wanted or refused KindInvalid; a server whose HELLO
// answer names another server, such as Redis, KindInvalid; one that
// answers what is not RESP, or announces a reply over MaxReplyBytes,
// KindClosed). A ctx that ends first answers ctx.Err().
//
// addr may name several nodes of a cluster, separated by commas
// ("10.0.0.1:7380,10.0.0.2:7380"; the user, token and TLS of the first
// apply to all): they are tried in order, the first that answers HELLO wins,
// and when none does the error is the last one's. The store then asks
// that node for the cluster's slot map (CLUSTER SLOTS): a single server
// answers no map, and nothing else changes; a cluster's map has each
// key's commands sent to the node that serves its slot.
func Connect(ctx context.Context, addr string, opts ...ConnectOption) (*Store, error) {
	seeds, bad := parseAddresses(addr)
	if bad != nil {
		return nil, bad
	}
	first := seeds[0]
	cfg := connectConfig{token: first.token, useToken: first.hasToken, timeout: 10 * time.Second, maxIdle: 8, maxReply: DefaultMaxReplyBytes}
	for _, opt := range opts {
		opt(&cfg)
	}
	if bad := cfg.resolveAuth(first); bad != nil {
		return nil, bad
	}
	if cfg.maxReply < 1 {
		cfg.maxReply = DefaultMaxReplyBytes
	}
	if cfg.timeout <= 0 {
		cfg.timeout = 10 * time.Second
	}
	if cfg.tls == nil && first.tls {
		cfg.tls = &tls.Config{}
	}
	names := make([]string, len(seeds))
	for i, a := range seeds {
		names[i] = a.hostPort()
	}
	var err error
	for _, a := range seeds {
		var s *Store
		if s, err = connectTo(ctx, a, cfg, names); err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, err
}

// connectTo opens a first connection to a and asks for the slot map.
func connectTo(ctx context.Context, a address, cfg connectConfig, seeds []string) (*Store, error) {
	p := newPool(a, &cfg)
	c, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	slots, err := slotsOn(ctx, p, c)
	if err != nil {
		p.close()
		return nil, err
	}
	s := &Store{pool: p}
	if slots != nil {
		s.router = newRouter(cfg, seeds, p, slots)
	}
	return s, nil
}

// parseAddresses reads Connect's addresses, separated by commas. A bad
// one is named in the error.
func parseAddresses(text string) ([]address, *Error) {
	parts := strings.Split(text, ",")
	seeds := make([]address, len(parts))
	for i, part := range parts {
		a, bad := parseAddress(part)
		if bad != nil {
			return nil, bad
		}
		seeds[i] = a
	}
	return seeds, nil
}

// poolFor answers the pool of the node that serves key (the only one of a
// single server), or of the node a MOVED sent the command to.
func (s *Store) poolFor(key string, t *tries) (*pool, error) {
	switch {
	case s.router == nil:
		return s.pool, nil
	case t.next != "":
		next := t.next
		t.next = ""
		return s.router.poolOf(next)
	}
	return s.router.poolFor(key)
}

// connFor answers a connection to the node that serves key (see poolFor),
// and its pool. In cluster mode a node that cannot be reached has the map
// refreshed (from the other nodes) before its error is answered, so that
// the next command for the key goes to the node that serves it now.
func (s *Store) connFor(ctx context.Context, key string, t *tries) (*pool, *conn, error) {
	p, err := s.poolFor(key, t)
	if err != nil {
		return nil, nil, err
	}
	c, err := p.get(ctx)
	if err != nil && err != errPoolClosed && ctx.Err() == nil && s.router != nil {
		s.router.refresh(ctx, p.addr.hostPort())
	}
	return p, c, err
}

// isClosed: Close was called.
func (s *Store) isClosed() bool {
	if s.router == nil {
		return s.pool.isClosed()
	}
	s.router.mu.Lock()
	defer s.router.mu.Unlock()
	return s.router.closed
}

// Close closes every connection: holds still waiting answer kind
// KindClosed, leases still held are lost ("its store closed": their
// functions' contexts end) and the server lets their keys go; every later
// call answers KindClosed. Closing twice is harmless; it answers nil.
func (s *Store) Close() error {
	if s.router != nil {
		s.router.close()
	} else {
		s.pool.close()
	}
	return nil
}
