package locks

import (
	"context"
	"strconv"
	"time"
)

// The defaults of a lock's ttl and a hold's wait.
const (
	DefaultTTL  = 10 * time.Second
	DefaultWait = 10 * time.Second
)

// Lock is a named lock of a store: any number of keys, each with one
// holder at a time and a first-come, first-served line of waiters. It is
// safe for use by many goroutines at once. Opening a name again gives a
// handle on the same keys; the ttl and maxHold belong to the handle.
type Lock struct {
	store   *Store
	name    string
	ttl     time.Duration
	maxHold time.Duration
	// leaseArgs: the TTL and MAXHOLD every HOLD and TRYHOLD carries.
	leaseArgs []string
}

// LockOption configures OpenLock.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl, maxHold time.Duration
	hasMaxHold   bool
}

// TTL is how long a lease lives on the server past the last command its
// connection sent (10s unless given; at least 1ms). The store renews
// every third of it while a hold runs; a holder that cannot reach the
// server loses its lease (its context ends) by ttl less a tenth.
func TTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = d }
}

// MaxHold is the longest a lease may be held from its grant, however it
// is renewed (off unless given; at least 1ms). Past it the server revokes
// the lease and gives the key to the next in line at once; the function's
// context ends, and the hold answers ErrLost once the function returns.
func MaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) { c.maxHold, c.hasMaxHold = d, true }
}

// OpenLock opens the lock named name: 1 to 128 ASCII letters, digits and
// _ - . : (else KindInvalid). On a closed store it answers KindClosed.
func OpenLock(store *Store, name string, opts ...LockOption) (*Lock, error) {
	if store.pool.isClosed() {
		return nil, lockError(KindClosed, name, "the store is closed")
	}
	if bad := checkName(name); bad != nil {
		return nil, bad
	}
	cfg := lockConfig{ttl: DefaultTTL}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.ttl < time.Millisecond {
		return nil, lockError(KindInvalid, name, "a ttl is at least 1ms")
	}
	args := []string{"TTL", strconv.FormatInt(millis(cfg.ttl), 10)}
	if cfg.hasMaxHold {
		if cfg.maxHold < time.Millisecond {
			return nil, lockError(KindInvalid, name, "a maxHold is at least 1ms")
		}
		args = append(args, "MAXHOLD", strconv.FormatInt(millis(cfg.maxHold), 10))
	}
	return &Lock{store: store, name: name, ttl: cfg.ttl, maxHold: cfg.maxHold, leaseArgs: args}, nil
}

// Name answers the lock's name.
func (l *Lock) Name() string { return l.name }

// TTL answers the ttl of the leases held through this handle.
func (l *Lock) TTL() time.Duration { return l.ttl }

// MaxHold answers the maxHold of the leases held through this handle, 0
// when off.
func (l *Lock) MaxHold() time.Duration { return l.maxHold }

// HoldOption configures one Hold.
type HoldOption func(*holdConfig)

type holdConfig struct {
	wait time.Duration
}

// Wait is how long Hold stands in the key's line before it answers
// ErrInUse (10s unless given). Zero or less: do not wait at all.
func Wait(d time.Duration) HoldOption {
	return func(c *holdConfig) { c.wait = d }
}

// Hold waits in key's line, holds the key while fn runs, lets it go when
// fn returns (or panics), and answers fn's error unchanged.
//
// A key is a string or any integer type (9 and "9" are one key). fn's ctx
// ends the moment the lease is lost (maxHold passed, the ttl ran out, the
// connection dropped, or the server could not be heard from for the ttl)
// or ctx ends; Cause(ctx) then tells why. A lost lease makes Hold answer
// ErrLost once fn returns (wrapping fn's own error, when it returned one).
// A ctx that ends while Hold waits takes it out of the line at once, and
// Hold answers ctx.Err(). The wait passing answers ErrInUse, a full line
// ErrLimit, a closed store ErrClosed, and a hold of a key whose hold runs
// further up ctx (a hold inside a hold of the same key) ErrInvalid at once.
func (l *Lock) Hold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error, opts ...HoldOption) error {
	cfg := holdConfig{wait: DefaultWait}
	for _, opt := range opts {
		opt(&cfg)
	}
	k, err := l.prepare(key, fn)
	if err != nil {
		return err
	}
	if holding(ctx, l.store, l.name, k) {
		return errHoldInHold(l.name, k)
	}
	args := append([]string{"HOLD", l.name, k, "WAIT", strconv.FormatInt(millis(cfg.wait), 10)}, l.leaseArgs...)
	h := &keyHold{store: l.store, lock: l.name, key: k, ttl: l.ttl}
	granted, err := h.ask(ctx, args, cfg.wait)
	if err != nil {
		return err
	}
	if !granted {
		// HOLD answers a grant or an error, never a null.
		return keyError(KindInvalid, l.name, k, "the server answered HOLD with a null")
	}
	return h.run(ctx, fn)
}

// TryHold runs fn under the key only if the key is free, and never
// waits: acquired is false, fn not run, when the key is held (also when a
// hold of it runs further up ctx). Otherwise it is Hold without a wait;
// acquired reports whether fn ran.
func (l *Lock) TryHold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error) (acquired bool, err error) {
	k, err := l.prepare(key, fn)
	if err != nil {
		return false, err
	}
	if holding(ctx, l.store, l.name, k) {
		return false, nil
	}
	h := &keyHold{store: l.store, lock: l.name, key: k, ttl: l.ttl}
	granted, err := h.ask(ctx, append([]string{"TRYHOLD", l.name, k}, l.leaseArgs...), 0)
	if err != nil || !granted {
		return false, err
	}
	return true, h.run(ctx, fn)
}

// prepare checks what can be checked before asking: the key's type and
// text, the function, the store.
func (l *Lock) prepare(key any, fn func(context.Context, *Lease) error) (string, error) {
	k, bad := keyText(l.name, key)
	if bad != nil {
		return "", bad
	}
	if bad := checkKey(l.name, k); bad != nil {
		return "", bad
	}
	if fn == nil {
		return "", keyError(KindInvalid, l.name, k, "the function is nil")
	}
	if l.store.pool.isClosed() {
		return "", errStoreClosed(l.name, k)
	}
	return k, nil
}
