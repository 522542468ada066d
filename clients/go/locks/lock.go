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

// Lock is a named lock of a store: any number of keys, each with its
// permits (one unless Permits says more), held by as many holders as the
// permits allow, and a first-come, first-served line of waiters. It is
// safe for use by many goroutines at once. Opening a name again gives a
// handle on the same keys; the ttl and maxHold belong to the handle, the
// count of permits to the keys (the server refuses another count while a
// key of the lock is held or waited for).
type Lock struct {
	store   *Store
	name    string
	ttl     time.Duration
	maxHold time.Duration
	permits int
	// leaseArgs: the TTL, MAXHOLD and PERMITS every HOLD and TRYHOLD
	// carries.
	leaseArgs []string
}

// LockOption configures OpenLock.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl, maxHold time.Duration
	hasMaxHold   bool
	permits      int
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

// Permits is how many permits each key of the lock has: 1 unless given,
// at most 1,000,000. A key is held by as many holds at once as their
// permits (Take, Exclusive) fit in n: a semaphore of n, or with readers
// taking one and writers Exclusive, a read-write lock. The server checks
// the count at the first hold (a bad count, or another count than the one
// the lock's keys have now, fails it KindInvalid with the server's text).
func Permits(n int) LockOption {
	return func(c *lockConfig) { c.permits = n }
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
	cfg := lockConfig{ttl: DefaultTTL, permits: 1}
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
	if cfg.permits != 1 {
		// Only then: a server without permits keeps working for plain locks.
		args = append(args, "PERMITS", strconv.Itoa(cfg.permits))
	}
	return &Lock{store: store, name: name, ttl: cfg.ttl, maxHold: cfg.maxHold, permits: cfg.permits, leaseArgs: args}, nil
}

// Name answers the lock's name.
func (l *Lock) Name() string { return l.name }

// TTL answers the ttl of the leases held through this handle.
func (l *Lock) TTL() time.Duration { return l.ttl }

// MaxHold answers the maxHold of the leases held through this handle, 0
// when off.
func (l *Lock) MaxHold() time.Duration { return l.maxHold }

// Permits answers how many permits each key of the lock has.
func (l *Lock) Permits() int { return l.permits }

// HoldOption configures one Hold.
type HoldOption func(*holdConfig)

type holdConfig struct {
	wait      time.Duration
	take      int
	exclusive bool
	note      string
	hasNote   bool
}

// Wait is how long Hold stands in the key's line before it answers
// ErrInUse (10s unless given). Zero or less: do not wait at all. TryHold
// never waits, and ignores it.
func Wait(d time.Duration) HoldOption {
	return func(c *holdConfig) { c.wait = d }
}

// Take is how many of the key's permits the hold takes: 1 unless given,
// 1 to the lock's Permits (the server refuses any other count, KindInvalid,
// "... 6 permits asked of a lock of 5: invalid"). Of Take and Exclusive,
// the one given last wins.
func Take(m int) HoldOption {
	return func(c *holdConfig) { c.take, c.exclusive = m, false }
}

// Exclusive makes the hold take all of the key's permits: it holds the key
// alone (a read-write lock's writer). Of Take and Exclusive, the one given
// last wins.
func Exclusive() HoldOption {
	return func(c *holdConfig) { c.exclusive = true }
}

// Note attaches text to the lease, for whoever looks at the key: the
// server shows it with the holder in INSPECT (KeyHolder.Note), OBSERVE
// (an election's Leader.Note), HISTORY and its page. A note is 1 to 1,024
// bytes of UTF-8 without control characters; the server refuses any other
// (KindInvalid, "lock L: key "K": a note is 1 to 1024 bytes of UTF-8
// without control characters: invalid"). Without it a lease has no note.
// It works with Hold and TryHold; of several, the last one wins.
func Note(text string) HoldOption {
	return func(c *holdConfig) { c.note, c.hasNote = text, true }
}

// noteArgs answers the NOTE option, sent only when the hold has a note.
func noteArgs(cfg holdConfig) []string {
	if !cfg.hasNote {
		return nil
	}
	return []string{"NOTE", cfg.note}
}

// holdOptions applies opts over the defaults.
func holdOptions(opts []HoldOption) holdConfig {
	cfg := holdConfig{wait: DefaultWait, take: 1}
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// takeArgs answers how many permits the hold takes, and the TAKE option
// that says so, sent only when it is not 1: a server without permits
// keeps working for plain locks.
func (l *Lock) takeArgs(cfg holdConfig) (int, []string) {
	switch {
	case cfg.exclusive && l.permits == 1:
		return 1, nil
	case cfg.exclusive:
		return l.permits, []string{"TAKE", "ALL"}
	case cfg.take == 1:
		return 1, nil
	}
	return cfg.take, []string{"TAKE", strconv.Itoa(cfg.take)}
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
// further up ctx (a hold inside a hold of the same key, with any permits)
// ErrInvalid at once.
//
// On a lock of several permits the hold takes one, or Take's count, or
// all of them with Exclusive. The line is first come, first served with
// no overtaking: a hold is granted once its permits fit and nobody stands
// before it, so readers never starve a waiting Exclusive writer.
func (l *Lock) Hold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error, opts ...HoldOption) error {
	cfg := holdOptions(opts)
	k, err := l.prepare(key, fn)
	if err != nil {
		return err
	}
	if holding(ctx, l.store, l.name, k) {
		return errHoldInHold(l.name, k)
	}
	permits, take := l.takeArgs(cfg)
	args := append([]string{"HOLD", l.name, k, "WAIT", strconv.FormatInt(millis(cfg.wait), 10)}, l.leaseArgs...)
	args = append(append(args, take...), noteArgs(cfg)...)
	h := &keyHold{store: l.store, lock: l.name, key: k, ttl: l.ttl, permits: permits}
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

// TryHold runs fn under the key only if its permits fit now and nobody
// waits, and never waits: acquired is false, fn not run, otherwise (also
// when a hold of the key runs further up ctx). Otherwise it is Hold
// without a wait, with the same Take and Exclusive options (Wait is
// ignored); acquired reports whether fn ran.
func (l *Lock) TryHold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error, opts ...HoldOption) (acquired bool, err error) {
	cfg := holdOptions(opts)
	k, err := l.prepare(key, fn)
	if err != nil {
		return false, err
	}
	if holding(ctx, l.store, l.name, k) {
		return false, nil
	}
	permits, take := l.takeArgs(cfg)
	args := append(append([]string{"TRYHOLD", l.name, k}, l.leaseArgs...), take...)
	args = append(args, noteArgs(cfg)...)
	h := &keyHold{store: l.store, lock: l.name, key: k, ttl: l.ttl, permits: permits}
	granted, err := h.ask(ctx, args, 0)
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
