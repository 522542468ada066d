package locks

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

// Inspect passes INSPECT through: nil for a key with no state; while
// held, the holder's fence, its lease's clock, its connection, and the
// line behind it; once let go, free with the last fence.
func TestInspectAnswersTheServersSnapshot(t *testing.T) {
	store := startStore(t)
	const ttl = 2 * time.Second
	l := openLock(t, store, "inspect", TTL(ttl))
	ctx := context.Background()
	if info, err := l.Inspect(ctx, "k"); info != nil || err != nil {
		t.Fatalf("a key never held: %+v, %v", info, err)
	}

	holder := holdInBackground(t, l, 7)
	lease := holder.lease
	waiter := holdAsync(ctx, l, "7", nothing, Wait(30*time.Second))
	waitersAre(t, store, "inspect", 1)
	info, err := l.Inspect(ctx, 7)
	if err != nil || info == nil {
		t.Fatalf("%+v, %v", info, err)
	}
	if !info.Held || info.Fence != lease.Fence || info.Waiters != 1 {
		t.Fatalf("held %v, fence %d (the lease's %d), waiters %d", info.Held, info.Fence, lease.Fence, info.Waiters)
	}
	if info.LeaseLeft == nil || *info.LeaseLeft <= 0 || *info.LeaseLeft > ttl ||
		info.HeldFor == nil || *info.HeldFor < 0 {
		t.Fatalf("lease left %v, held for %v", info.LeaseLeft, info.HeldFor)
	}
	h := info.Holder
	if h == nil || h.ID <= 0 || h.Lease <= 0 {
		t.Fatalf("holder %+v", h)
	}
	if host, port, err := net.SplitHostPort(h.Addr); err != nil || host != "127.0.0.1" || port == "" {
		t.Fatalf("holder address %q", h.Addr)
	}

	holder.release(t)
	if err := within(t, "the waiter", 10*time.Second, waiter); err != nil {
		t.Fatal(err)
	}
	info, err = l.Inspect(ctx, strconv.Itoa(7))
	if err != nil || info == nil || info.Held || info.Fence <= lease.Fence || info.Holder != nil ||
		info.Waiters != 0 || info.LeaseLeft != nil {
		t.Fatalf("after both holds: %+v, %v", info, err)
	}

	if _, err := l.Inspect(ctx, ""); !errors.Is(err, ErrInvalid) || err.Error() != `lock inspect: key "": the key is empty: invalid` {
		t.Fatalf("an empty key: %v", err)
	}
	_ = store.Close()
	if _, err := l.Inspect(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed store: %v", err)
	}
}
