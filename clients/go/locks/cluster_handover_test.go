package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A planned hand-over on a real cluster (clients/testing/cluster.py):
// SIGTERM of a key's owner while a function holds the key. The lease
// follows its partition to the next owner and the function never learns
// of it; a waiter keeps its place in the key's line.

// keysOn answers n keys, prefix0, prefix1, ..., whose slots node serves
// as the store's map has it.
func keysOn(t *testing.T, s *Store, prefix, node string, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i > 100000 {
			t.Fatalf("no %d keys on %s", n, node)
		}
		if k := prefix + strconv.Itoa(i); ownerOf(s, k) == node {
			keys = append(keys, k)
		}
	}
	return keys
}

// canHandOver: the node says handover = 1 in HELLO.
func canHandOver(t *testing.T, addr string) bool {
	return helloNumber(rawCommand(t, addr, "HELLO", "3"), "handover") == 1
}

// servedElsewhere waits until a node other than gone serves key's slot,
// as the live nodes' CLUSTER SLOTS say, and answers that node.
func servedElsewhere(t *testing.T, f *clusterFixture, live, gone, key string) string {
	t.Helper()
	var owner string
	waitUntil(t, "another node serving "+key, 10*time.Second, func() bool {
		owner = slotsOf(rawCommand(t, live, "CLUSTER", "SLOTS"), "127.0.0.1")[slotOf(key)]
		return owner != "" && owner != gone
	})
	return owner
}

// SIGTERM of the node that owns two keys, while a function holds each
// (about 3s, the ttl 2s) and a client waits for the second. The node hands
// its partitions over and exits; then:
//   - each function runs to its end, its ctx never ended, its lease never
//     lost, and its hold answers success;
//   - the fence is unchanged: the client takes a REATTACH answer only
//     with the lease's own fence, and the new owner's INSPECT lists the
//     holder under it;
//   - the lease is renewed on the new owner: past its ttl after the
//     signal another client's TryHold still finds the key held;
//   - the first key is free once its hold returns: another client takes it
//     at once;
//   - the waiter kept its place: it is granted the second key before a
//     client that began waiting after the hand-over.
func TestAPlannedHandOverKeepsTheLeaseAndTheLine(t *testing.T) {
	// A node drains for --drain-timeout before it hands over: the
	// shortest the server takes ("0s" it refuses).
	f := startCluster(t)
	const victim = 1
	gone := f.Nodes[victim].Addr
	if !canHandOver(t, gone) {
		t.Skipf("the server at %s does not say handover = 1 in HELLO: it cannot hand leases over (HOLDLINE_BIN is an older holdline)", gone)
	}
	live := f.Nodes[0].Addr
	holder, waiter, prober := connect(t, f.addrs()), connect(t, f.addrs()), connect(t, f.addrs())
	keys := keysOn(t, holder, "ho-", gone, 2)
	free, queued := keys[0], keys[1]
	l := openLock(t, holder, "ho", TTL(clusterMaxTTL))
	probe := openLock(t, prober, "ho", TTL(clusterMaxTTL))

	const runFor = 3 * time.Second
	signalled := make(chan time.Time, 1)
	// fn holds its key for runFor (the SIGTERM comes 600ms in) and checks
	// what the function can see: its ctx, its lease, its fence at the
	// new owner, the key still held past the ttl after the signal.
	// (No t.Fatal here: it runs on the hold's goroutine.)
	fn := func(key string) func(ctx context.Context, lease *Lease) error {
		return func(ctx context.Context, lease *Lease) error {
			start := time.Now()
			fence := lease.Fence
			var at time.Time
			select {
			case at = <-signalled:
				signalled <- at
			case <-time.After(10 * time.Second):
				return errors.New("no SIGTERM")
			}
			for _, wait := range []time.Duration{time.Until(at.Add(clusterMaxTTL + 200*time.Millisecond)), time.Until(start.Add(runFor))} {
				time.Sleep(wait)
				acquired, err := probe.TryHold(context.Background(), key, nothing)
				if err != nil || acquired {
					return fmt.Errorf("%v after the signal another client's TryHold answered %v, %v", time.Since(at), acquired, err)
				}
			}
			info, err := probe.Inspect(context.Background(), key)
			switch {
			case err != nil || info == nil || !info.Held || len(info.HolderList) != 1 || info.HolderList[0].Fence != fence:
				return fmt.Errorf("the new owner's INSPECT: %+v, %v (the lease's fence %d)", info, err, fence)
			case ctx.Err() != nil || lease.Err() != nil:
				return fmt.Errorf("the lease was lost: %v, %v", ctx.Err(), lease.Err())
			case lease.Fence != fence:
				return fmt.Errorf("fence %d, then %d", fence, lease.Fence)
			}
			return nil
		}
	}
	held := make(chan error, 2)
	for _, k := range keys {
		k := k
		go func() { held <- l.Hold(context.Background(), k, fn(k)) }()
	}
	waitUntil(t, "both keys held", 5*time.Second, func() bool {
		for _, k := range keys {
			if info, err := probe.Inspect(context.Background(), k); err != nil || info == nil || !info.Held {
				return false
			}
		}
		return true
	})
	var order atomic.Int32
	grantedAs := func(n *int32) func(context.Context, *Lease) error {
		return func(context.Context, *Lease) error { *n = order.Add(1); return nil }
	}
	var first, second int32
	waiting := holdAsync(context.Background(), openLock(t, waiter, "ho", TTL(clusterMaxTTL)), queued, grantedAs(&first), Wait(30*time.Second))
	waitUntil(t, "the waiter in line", 5*time.Second, func() bool {
		info, err := probe.Inspect(context.Background(), queued)
		return err == nil && info != nil && info.Waiters == 1
	})
	// The partitions' owners (node indexes) and the keys' partitions, for
	// the log: which partitions a SIGTERM hands over.
	m := slotsOf(rawCommand(t, live, "CLUSTER", "SLOTS"), "127.0.0.1")
	owners := make([]int, 8)
	for p := range owners {
		owners[p] = -1
		for i, n := range f.Nodes {
			if m[p*slotCount/8] == n.Addr {
				owners[p] = i
			}
		}
	}
	t.Logf("partitions' owners %v; node %d's keys %v are in partitions %d and %d", owners, victim, keys, slotOf(free)*8/slotCount, slotOf(queued)*8/slotCount)
	time.Sleep(600 * time.Millisecond)
	if err := syscall.Kill(f.Nodes[victim].Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled <- time.Now()
	owner := servedElsewhere(t, f, live, gone, queued)
	t.Logf("%s now served by %s", queued, owner)
	// A client that begins waiting after the hand-over (connected then,
	// so its map is the new one): behind the waiter.
	later := connect(t, live)
	waitingLater := holdAsync(context.Background(), openLock(t, later, "ho", TTL(clusterMaxTTL)), queued, grantedAs(&second), Wait(30*time.Second))
	// The later waiter in line before the holder lets go (not fatal here:
	// a hand-over that failed shows in the holds' answers below).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := probe.Inspect(context.Background(), queued)
		if err == nil && info != nil && info.Waiters >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("no waiter in line at the new owner after 5s: INSPECT %s answered %+v, %v", queued, info, err)
			break
		}
	}
	for range keys {
		if err := within(t, "a hold", 10*time.Second, held); err != nil {
			t.Fatalf("a hold across the hand-over answered %v", err)
		}
	}
	acquired, err := probe.TryHold(context.Background(), free, nothing)
	if err != nil || !acquired {
		t.Fatalf("%s after its hold returned: TryHold answered %v, %v", free, acquired, err)
	}
	for _, w := range []<-chan error{waiting, waitingLater} {
		if err := within(t, "a waiter", 10*time.Second, w); err != nil {
			t.Fatalf("a waiter answered %v", err)
		}
	}
	if first != 1 || second != 2 {
		t.Fatalf("the waiter from before the hand-over was granted %d-th, the one from after %d-th", first, second)
	}
}
