package locks

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A holder behind a frozen network path (its sockets open, nothing
// flowing) takes its lease for lost before the server gives the key to
// the next in line.
func TestAHolderBehindAFrozenNetworkLetsGoBeforeTheKeyIsGivenAway(t *testing.T) {
	srv := startServer(t)
	p := startProxy(t, srv.addr)
	const ttl = 2 * time.Second
	behind := openLock(t, connect(t, p.addr), "frozen", TTL(ttl))
	direct := connect(t, srv.addr)
	held := holdUntilLost(t, behind, "k")
	nextAt := make(chan time.Time, 1)
	next := holdAsync(context.Background(), openLock(t, direct, "frozen", TTL(ttl)), "k", func(ctx context.Context, lease *Lease) error {
		nextAt <- time.Now()
		return nil
	}, Wait(30*time.Second))
	waitersAre(t, direct, "frozen", 1)
	p.freeze(t)
	frozenAt := time.Now()
	lost := within(t, "the frozen holder's ctx", 10*time.Second, held.lost).at
	given := within(t, "the next grant", 10*time.Second, nextAt)
	t.Logf("lost %v after the freeze, %v before the key was given on", lost.Sub(frozenAt), given.Sub(lost))
	if given.Sub(lost) < 10*time.Millisecond {
		t.Fatalf("the key was given on %v after the frozen holder let go", given.Sub(lost))
	}
	if lost.Sub(frozenAt) > ttl+500*time.Millisecond {
		t.Fatalf("the frozen holder let go %v after the freeze", lost.Sub(frozenAt))
	}
	want := `lock frozen: key "k": the lease was lost: the server answered nothing for its ttl (2s)`
	if err := within(t, "the frozen hold", 10*time.Second, held.done); !errors.Is(err, ErrLost) || err.Error() != want {
		t.Fatalf("%v", err)
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
}

// A waiter behind a frozen network path gives up after its wait plus its
// ttl, closing its connection: the key is never granted to it later.
func TestAWaiterBehindAFrozenNetworkGivesUp(t *testing.T) {
	srv := startServer(t)
	p := startProxy(t, srv.addr)
	const ttl, wait = 2 * time.Second, 3 * time.Second
	direct := connect(t, srv.addr)
	l := openLock(t, direct, "frozen", TTL(ttl))
	holder := holdInBackground(t, l, "k")
	ran := make(chan struct{}, 1)
	start := time.Now()
	waiting := holdAsync(context.Background(), openLock(t, connect(t, p.addr), "frozen", TTL(ttl)), "k",
		func(context.Context, *Lease) error { ran <- struct{}{}; return nil }, Wait(wait))
	waitersAre(t, direct, "frozen", 1)
	p.freeze(t)
	err := within(t, "the frozen waiter", wait+ttl+5*time.Second, waiting)
	took := time.Since(start)
	want := `lock frozen: key "k": the server answered nothing for the hold's wait plus its ttl (3s + 2s): closed`
	if !errors.Is(err, ErrClosed) || err.Error() != want {
		t.Fatalf("%v", err)
	}
	if took < wait+ttl-100*time.Millisecond || took > wait+ttl+time.Second {
		t.Fatalf("the frozen waiter gave up after %v", took)
	}
	p.thaw(t)
	holder.release(t)
	// Another client gets the key; the abandoned waiter never runs.
	other := openLock(t, connect(t, srv.addr), "frozen")
	if err := other.Hold(context.Background(), "k", nothing, Wait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("the abandoned waiter ran its function")
	default:
	}
}
