package locks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitersAreServedFirstComeFirstServed(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "fifo")
	first := holdInBackground(t, l, "k")
	const n = 8
	var mu sync.Mutex
	var order []int
	var fences []uint64
	var dones []<-chan error
	for i := 0; i < n; i++ {
		i := i
		dones = append(dones, holdAsync(context.Background(), l, "k", func(ctx context.Context, lease *Lease) error {
			mu.Lock()
			order, fences = append(order, i), append(fences, lease.Fence)
			mu.Unlock()
			return nil
		}, Wait(30*time.Second)))
		// The next starts once this one stands in line.
		waitersAre(t, store, "fifo", int64(i+1))
	}
	first.release(t)
	for i, d := range dones {
		if err := within(t, fmt.Sprintf("waiter %d", i), 20*time.Second, d); err != nil {
			t.Fatal(err)
		}
	}
	for i := range order {
		if order[i] != i || i > 0 && fences[i] <= fences[i-1] {
			t.Fatalf("granted in order %v with fences %v", order, fences)
		}
	}
}

func TestAKeyHasOneHolderAtATime(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "one")
	var inside [3]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 12; g++ {
		g := g
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				key := (g + i) % 3
				errs <- l.Hold(context.Background(), key, func(ctx context.Context, lease *Lease) error {
					if inside[key].Add(1) != 1 {
						return fmt.Errorf("two holders of key %d", key)
					}
					time.Sleep(time.Millisecond)
					inside[key].Add(-1)
					return nil
				}, Wait(60*time.Second))
			}
		}()
	}
	go func() { wg.Wait(); close(errs) }()
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A held key goes to no other hold, whose function never runs: a Hold
// fails in use once its wait is over, with the server's text, and at once
// with no wait; a TryHold answers false and no error. Once the key is
// free, a TryHold holds it, runs its function and answers its error.
func TestAHeldKeyGoesToNoOtherHoldAndAFreeOneToATry(t *testing.T) {
	store := startStore(t)
	invoices := openLock(t, store, "invoices")
	holder := holdInBackground(t, invoices, "9")
	ctx := context.Background()
	inUseText := `lock invoices: key "9": held past the hold's wait: in use`
	type fn = func(context.Context, *Lease) error
	for _, c := range []struct {
		name    string
		attempt func(fn) (acquired bool, err error)
		want    string // the error's text; "": no error
	}{
		// The integer 9 is the key "9".
		{"a wait", func(f fn) (bool, error) { return false, invoices.Hold(ctx, 9, f, Wait(100*time.Millisecond)) }, inUseText},
		{"no wait", func(f fn) (bool, error) { return false, invoices.Hold(ctx, uint16(9), f, Wait(0)) }, inUseText},
		{"a try", func(f fn) (bool, error) { return invoices.TryHold(ctx, "9", f) }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ran := false
			acquired, err := c.attempt(func(context.Context, *Lease) error { ran = true; return nil })
			var e *Error
			inUse := errors.Is(err, ErrInUse) && errors.As(err, &e) && e.Kind == KindInUse
			if acquired || ran || c.want == "" && err != nil || c.want != "" && (!inUse || err.Error() != c.want) {
				t.Fatalf("acquired %v, ran %v: %v", acquired, ran, err)
			}
		})
	}
	holder.release(t)
	mine := errors.New("mine")
	ran := false
	acquired, err := invoices.TryHold(ctx, "9", func(ctx context.Context, lease *Lease) error {
		ran = lease.Key == "9" && lease.Fence > 0
		return mine
	})
	if !acquired || err != mine || !ran {
		t.Fatalf("free key: acquired %v, err %v, ran %v", acquired, err, ran)
	}
}

func TestTheFunctionsOwnErrorIsAnsweredUnchanged(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "own")
	mine := errors.New("declined")
	wrapped := fmt.Errorf("charging: %w", mine)
	if err := l.Hold(context.Background(), "k", func(context.Context, *Lease) error { return wrapped }); err != wrapped || !errors.Is(err, mine) {
		t.Fatalf("%v", err)
	}
	// And the key was let go.
	acquired, err := l.TryHold(context.Background(), "k", nothing)
	if !acquired || err != nil {
		t.Fatalf("after: %v %v", acquired, err)
	}
}

func TestMaxHoldRevokesCancelsAndHandsTheKeyOnAtOnce(t *testing.T) {
	store := startStore(t)
	invoices := openLock(t, store, "invoices", TTL(10*time.Second), MaxHold(300*time.Millisecond))
	cancelled := make(chan time.Time, 1)
	letGo := make(chan struct{})
	granted := make(chan struct{})
	var cause error
	done := holdAsync(context.Background(), invoices, "m", func(ctx context.Context, lease *Lease) error {
		close(granted)
		<-ctx.Done()
		cancelled <- time.Now()
		cause = Cause(ctx)
		<-letGo // hung on: the next in line must not wait for this
		return ctx.Err()
	})
	within(t, "the grant", 10*time.Second, granted)
	next := make(chan time.Time, 1)
	nextDone := holdAsync(context.Background(), invoices, "m", func(ctx context.Context, lease *Lease) error {
		next <- time.Now()
		return nil
	}, Wait(30*time.Second))
	grantedAt := within(t, "the next waiter's grant", 10*time.Second, next)
	cancelledAt := within(t, "the revoked holder's ctx", 10*time.Second, cancelled)
	close(letGo)
	want := `lock invoices: key "m": the lease was lost: it was revoked at its maxHold`
	err := within(t, "the revoked hold", 10*time.Second, done)
	if !errors.Is(err, ErrLost) || err.Error() != want || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if cause == nil || cause.Error() != want {
		t.Fatalf("Cause: %v", cause)
	}
	if err := <-nextDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("next granted %v after the revoked holder's ctx ended", grantedAt.Sub(cancelledAt))
}

func TestACancelledWaiterLeavesTheLineAtOnce(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "cancel")
	holder := holdInBackground(t, l, "k")
	ctx, cancel := context.WithCancel(context.Background())
	ran := atomic.Bool{}
	// The longest wait there is: only the cancel ends it.
	cancelled := holdAsync(ctx, l, "k", func(context.Context, *Lease) error { ran.Store(true); return nil }, Wait(math.MaxInt64))
	waitersAre(t, store, "cancel", 1)
	cancel()
	if err := within(t, "the cancelled hold", 2*time.Second, cancelled); err != context.Canceled {
		t.Fatalf("%v", err)
	}
	waitersAre(t, store, "cancel", 0)
	deadline, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	if err := l.Hold(deadline, "k", nothing, Wait(60*time.Second)); err != context.DeadlineExceeded {
		t.Fatalf("%v", err)
	}
	next := holdAsync(context.Background(), l, "k", nothing, Wait(60*time.Second))
	waitersAre(t, store, "cancel", 1)
	holder.release(t)
	if err := within(t, "the next waiter", 10*time.Second, next); err != nil || ran.Load() {
		t.Fatalf("%v (the cancelled one ran: %v)", err, ran.Load())
	}
}

func TestAHoldInsideAHoldOfTheSameKeyIsInvalidAtOnce(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "invoices")
	again := openLock(t, store, "invoices", TTL(time.Second)) // the same keys
	var leaked context.Context
	err := l.Hold(context.Background(), 7, func(ctx context.Context, lease *Lease) error {
		inner, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		start := time.Now()
		err := again.Hold(inner, "7", nothing)
		want := `lock invoices: key "7": hold inside a hold of the same key: invalid`
		if !errors.Is(err, ErrInvalid) || err.Error() != want || time.Since(start) > 5*time.Second {
			return fmt.Errorf("inner hold: %v", err)
		}
		if ok, err := l.TryHold(inner, 7, nothing); ok || err != nil {
			return fmt.Errorf("inner try: %v %v", ok, err)
		}
		// Another key is another matter.
		if err := l.Hold(inner, 8, nothing); err != nil {
			return fmt.Errorf("another key: %v", err)
		}
		leaked = ctx
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Once the outer function has returned, its context holds nothing.
	if err := l.Hold(leaked, 7, nothing); err != context.Canceled {
		t.Fatalf("after the outer hold: %v", err)
	}
	if err := l.Hold(context.Background(), 7, nothing); err != nil {
		t.Fatal(err)
	}
}

// Renewal runs while a HOLD waits and while it holds: a ttl far shorter
// than the wait and the work loses nothing.
func TestRenewalKeepsAShortTTLLeaseThroughALongWaitAndHold(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "renew", TTL(300*time.Millisecond))
	holder := holdInBackground(t, l, "k")
	waited := holdAsync(context.Background(), l, "k", func(ctx context.Context, lease *Lease) error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("lost after its wait: %v", Cause(ctx))
		case <-time.After(time.Second):
			return nil
		}
	}, Wait(30*time.Second))
	waitersAre(t, store, "renew", 1)
	time.Sleep(time.Second) // the holder holds on for three ttls; the waiter waits
	holder.release(t)
	if err := within(t, "the waiter", 10*time.Second, waited); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, store, "renew"); s["expirations"] != 0 {
		t.Fatalf("%v", s)
	}
}

func TestClosingTheStoreEndsWaitsAndLeases(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "close")
	holderCtx := make(chan context.Context, 1)
	held := holdAsync(context.Background(), l, "k", func(ctx context.Context, lease *Lease) error {
		holderCtx <- ctx
		<-ctx.Done()
		return nil
	})
	ctx := within(t, "the grant", 10*time.Second, holderCtx)
	waiting := holdAsync(context.Background(), l, "k", nothing, Wait(60*time.Second))
	waitersAre(t, store, "close", 1)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, "the waiter", 5*time.Second, waiting); !errors.Is(err, ErrClosed) ||
		err.Error() != `lock close: key "k": the store is closed: closed` {
		t.Fatalf("waiter: %v", err)
	}
	want := `lock close: key "k": the lease was lost: its store closed`
	if err := within(t, "the holder", 5*time.Second, held); !errors.Is(err, ErrLost) || err.Error() != want {
		t.Fatalf("holder: %v", err)
	}
	if Cause(ctx).Error() != want {
		t.Fatalf("cause: %v", Cause(ctx))
	}
	if err := l.Hold(context.Background(), "k", nothing); !errors.Is(err, ErrClosed) {
		t.Fatalf("after: %v", err)
	}
	if ok, err := l.TryHold(context.Background(), "k", nothing); ok || !errors.Is(err, ErrClosed) {
		t.Fatalf("try after: %v", err)
	}
	if _, err := OpenLock(store, "other"); !errors.Is(err, ErrClosed) || err.Error() != "lock other: the store is closed: closed" {
		t.Fatalf("open after: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAPanicLetsTheKeyGoAndGoesOn(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "panic")
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v", p)
			}
		}()
		_ = l.Hold(context.Background(), "k", func(context.Context, *Lease) error { panic("boom") })
	}()
	if err := l.Hold(context.Background(), "k", nothing, Wait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestBadOptionsAndArgumentsAreInvalidAtOnce(t *testing.T) {
	store := startStore(t)
	cases := map[string]func() error{
		`lock l: a ttl is at least 1ms: invalid`: func() error { _, err := OpenLock(store, "l", TTL(0)); return err },
		`lock l: a maxHold is at least 1ms: invalid`: func() error {
			_, err := OpenLock(store, "l", MaxHold(time.Microsecond))
			return err
		},
		`lock "no way": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid`: func() error {
			_, err := OpenLock(store, "no way")
			return err
		},
		`lock l: a key is a string or an integer, not float64: invalid`: func() error {
			return openLock(t, store, "l").Hold(context.Background(), 1.5, nothing)
		},
		`lock l: key "": the key is empty: invalid`: func() error {
			_, err := openLock(t, store, "l").TryHold(context.Background(), "", nothing)
			return err
		},
		`lock l: key "k": the function is nil: invalid`: func() error {
			return openLock(t, store, "l").Hold(context.Background(), "k", nil)
		},
	}
	for want, call := range cases {
		if err := call(); !errors.Is(err, ErrInvalid) || err.Error() != want {
			t.Errorf("want %s, got %v", want, err)
		}
	}
}
