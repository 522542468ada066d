package locks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// heldKey is one hold whose function runs in a context: the contexts a
// hold's function is given carry the chain of them, innermost first, so
// that a hold of the same key further down is refused at once.
type heldKey struct {
	owner   any // the *Store
	lock    string
	key     string
	state   *leaseState
	outer   *heldKey
	running atomic.Bool // the function has not returned yet
}

// holdsKey is the context value key of the innermost heldKey.
type holdsKey struct{}

// heldIn answers the innermost hold running in ctx, or nil.
func heldIn(ctx context.Context) *heldKey {
	h, _ := ctx.Value(holdsKey{}).(*heldKey)
	return h
}

// holding reports whether a hold of lock's key on owner is running in ctx.
func holding(ctx context.Context, owner any, lock, key string) bool {
	for h := heldIn(ctx); h != nil; h = h.outer {
		if h.owner == owner && h.lock == lock && h.key == key && h.running.Load() {
			return true
		}
	}
	return false
}

// Cause answers why ctx ended: the lost error (kind KindLost) when ctx is
// a hold function's context, or one made from it, and that hold's lease
// (or an outer hold's) was lost; else ctx.Err(). It answers nil while ctx
// has not ended. (Go 1.20's context.Cause does this for its own contexts.)
func Cause(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	for h := heldIn(ctx); h != nil; h = h.outer {
		if lost := h.state.check(); lost != nil {
			return lost
		}
	}
	return err
}

// holdCtx is the context a hold's function runs in: it ends when the
// caller's context does, or the moment the lease is lost. Done and Err
// read the lease's clock themselves, so that the first look after a
// stall of this process already sees the loss.
type holdCtx struct {
	parent context.Context
	held   *heldKey

	mu   sync.Mutex
	done chan struct{}
	err  error
}

func newHoldCtx(parent context.Context, held *heldKey) *holdCtx {
	return &holdCtx{parent: parent, held: held, done: make(chan struct{})}
}

// Deadline is the caller's: a lease has no fixed end.
func (c *holdCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done is closed once the lease is lost or the caller's context ends.
func (c *holdCtx) Done() <-chan struct{} {
	c.look()
	return c.done
}

// Err is context.Canceled once the lease is lost (Cause tells why), the
// caller's context's error once that ended, else nil.
func (c *holdCtx) Err() error {
	c.look()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value answers the hold chain for holdsKey, and the caller's values.
func (c *holdCtx) Value(key any) any {
	if key == (holdsKey{}) {
		return c.held
	}
	return c.parent.Value(key)
}

func (c *holdCtx) String() string { return "locks.holdContext" }

// look ends the context if the lease is lost or the caller's ended.
func (c *holdCtx) look() {
	select {
	case <-c.done:
		return
	default:
	}
	if c.held.state.check() != nil {
		c.cancel(context.Canceled)
	} else if err := c.parent.Err(); err != nil {
		c.cancel(err)
	}
}

func (c *holdCtx) cancel(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
	c.mu.Unlock()
}

// watch ends the context when the lease is lost or the caller's context
// ends, for those blocked on Done; stop ends the watch.
func (c *holdCtx) watch() (stop func()) {
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-c.held.state.lostCh:
			c.cancel(context.Canceled)
		case <-c.parent.Done():
			c.cancel(c.parent.Err())
		case <-quit:
		}
	}()
	return func() { once.Do(func() { close(quit) }) }
}
