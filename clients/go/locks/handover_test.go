package locks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A planned hand-over against scripted nodes: the secret, the moved push,
// REATTACH, and a waiter that keeps its place (docs/src/cluster.md,
// "Rolling restarts: a planned hand-over moves leases", "On the wire").

// helloHandoverReply is a scripted node's answer to HELLO when it can
// hand leases over.
const helloHandoverReply = "%3\r\n+server\r\n+holdline\r\n+proto\r\n:3\r\n+handover\r\n:1\r\n"

// movedPush is the push of a node that handed lease id over to node addr.
func movedPush(id int64, slot int, addr string) string {
	return fmt.Sprintf(">4\r\n$5\r\nmoved\r\n:%d\r\n:%d\r\n%s", id, slot, bulkReply(addr))
}

// secretOf answers the SECRET argument of a HOLD or TRYHOLD, "" without.
func secretOf(args []string) string {
	for i := 3; i+1 < len(args); i++ {
		if args[i] == "SECRET" {
			return args[i+1]
		}
	}
	return ""
}

var secretPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// handoverCluster: two scripted nodes (three with third), node 0 serving
// every slot, both saying handover = 1; script as newFakeCluster's.
func handoverCluster(t *testing.T, n int, script func(fc *fakeCluster, node int, args []string) string) *fakeCluster {
	t.Helper()
	fc := newFakeCluster(t, n, script)
	fc.mu.Lock()
	fc.handover = true
	fc.mu.Unlock()
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	return fc
}

// A node that says handover = 1 is sent SECRET with every HOLD and
// TRYHOLD, 32 hex digits new for each hold; one that does not, none.
func TestASecretGoesOnlyToANodeThatCanHandOver(t *testing.T) {
	var mu sync.Mutex
	var secrets []string
	script := func(fc *fakeCluster, node int, args []string) string {
		if args[0] == "HOLD" || args[0] == "TRYHOLD" {
			mu.Lock()
			secrets = append(secrets, secretOf(args))
			mu.Unlock()
		}
		return ""
	}
	old := newFakeCluster(t, 1, script)
	old.setRanges(slotRange{0, slotCount - 1, 0})
	l := openLock(t, connect(t, old.addr(0)), "l")
	if err := l.Hold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryHold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if len(secrets) != 2 || secrets[0] != "" || secrets[1] != "" {
		t.Fatalf("a node without handover was sent secrets %q", secrets)
	}
	secrets = nil
	fc := handoverCluster(t, 1, script)
	l = openLock(t, connect(t, fc.addr(0)), "l")
	for i := 0; i < 2; i++ {
		if err := l.Hold(context.Background(), "k", nothing); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryHold(context.Background(), "k", nothing); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, s := range secrets {
		if !secretPattern.MatchString(s) || seen[s] {
			t.Fatalf("secrets %q: each 32 hex digits, new per hold", secrets)
		}
		seen[s] = true
	}
	if len(seen) != 4 {
		t.Fatalf("secrets %q", secrets)
	}
}

// movingNodes scripts a hand-over: node 0 grants HOLD (lease 1, fence 5)
// and, once moveNow is set, answers the next RENEW with the moved push
// (lease 1 to node 1) and then MOVED, as the old owner does; node 1
// answers REATTACH as reattach says (the secret is checked: a wrong one
// is answered LOST). Leases on node 1 are 7.
type movingNodes struct {
	*fakeCluster
	moveNow   atomic.Bool
	movedAt   atomic.Int64 // unix ns of the push
	secret    atomic.Value // the HOLD's secret
	reattach  func(try int) string
	reattachs atomic.Int32
	// moveOnRelease: node 0 answers RELEASE with MOVED (no push).
	moveOnRelease atomic.Bool
}

func newMovingNodes(t *testing.T, n int, reattach func(mn *movingNodes, try int) string) *movingNodes {
	mn := &movingNodes{}
	mn.reattach = func(try int) string { return reattach(mn, try) }
	mn.fakeCluster = handoverCluster(t, n, func(fc *fakeCluster, node int, args []string) string {
		switch {
		case node == 0 && args[0] == "HOLD":
			mn.secret.Store(secretOf(args))
			return grantReply
		case node == 0 && args[0] == "RENEW" && mn.moveNow.Load():
			slot := slotOf("k")
			if mn.movedAt.Load() == 0 {
				mn.movedAt.Store(time.Now().UnixNano())
				return movedPush(1, slot, fc.addr(1)) + fmt.Sprintf("-MOVED %d %s\r\n", slot, fc.addr(1))
			}
			return fmt.Sprintf("-MOVED %d %s\r\n", slot, fc.addr(1))
		case node == 0 && args[0] == "RELEASE" && mn.moveOnRelease.Load():
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf("k"), fc.addr(1))
		case args[0] == "REATTACH":
			if want, _ := mn.secret.Load().(string); len(args) != 4 || args[1] != "l" || args[2] != "k" || args[3] != want {
				return "-LOST lock l: key \"k\": the lease was lost: nothing was handed over under its secret\r\n"
			}
			return mn.reattach(int(mn.reattachs.Add(1)))
		case node > 0 && (args[0] == "RENEW" || args[0] == "RELEASE") && args[1] != "7":
			return "-LOST wrong lease " + args[1] + "\r\n"
		}
		return ""
	})
	return mn
}

const reattachGrant = "*2\r\n:7\r\n:5\r\n"

// A lease told it moved re-attaches at the node named: the function runs
// on, its ctx not cancelled, its fence the same; the lease is renewed and
// released there under its new id, and nothing more goes to the old node.
func TestALeaseFollowsItsPartitionToTheNextNode(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mn := newMovingNodes(t, 2, func(mn *movingNodes, try int) string { return reattachGrant })
	l := openLock(t, connect(t, mn.addr(0)), "l", TTL(ttl))
	var renewsAtMove int
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		time.Sleep(ttl / 2)
		mn.moveNow.Store(true)
		waitUntil(t, "the move", 2*time.Second, func() bool { return mn.movedAt.Load() != 0 })
		renewsAtMove = mn.sent(0, "RENEW")
		// Three ttls on the new node: its renewals keep the lease.
		time.Sleep(3 * ttl)
		switch {
		case ctx.Err() != nil || lease.Err() != nil:
			return fmt.Errorf("lost: %v %v", ctx.Err(), lease.Err())
		case lease.Fence != 5:
			return fmt.Errorf("fence %d", lease.Fence)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := mn.sent(0, "RENEW"); n != renewsAtMove {
		t.Errorf("%d RENEWs to the old node after the move", n-renewsAtMove)
	}
	if mn.sent(0, "RELEASE") != 0 || mn.sent(1, "REATTACH l k ") != 1 || mn.sent(1, "RENEW 7") < 3 || mn.sent(1, "RELEASE 7") != 1 {
		t.Fatalf("old node: %q; new node: %q", mn.log[0], mn.log[1])
	}
}

// The new node's REATTACH answers CLUSTERDOWN (between owners), then MOVED
// (another node took it): the lease follows to the third node and keeps
// going there.
func TestAReattachFollowsClusterDownAndMoved(t *testing.T) {
	const ttl = 600 * time.Millisecond
	mn := newMovingNodes(t, 3, func(mn *movingNodes, try int) string {
		switch try {
		case 1, 2:
			return "-CLUSTERDOWN Hash slot not served\r\n"
		case 3:
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf("k"), mn.addr(2))
		}
		return reattachGrant
	})
	l := openLock(t, connect(t, mn.addr(0)), "l", TTL(ttl))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		mn.moveNow.Store(true)
		waitUntil(t, "the move", 2*time.Second, func() bool { return mn.movedAt.Load() != 0 })
		time.Sleep(2 * ttl)
		if ctx.Err() != nil || lease.Err() != nil {
			return fmt.Errorf("lost: %v", lease.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mn.sent(1, "REATTACH") != 3 || mn.sent(2, "REATTACH") != 1 || mn.sent(2, "RELEASE 7") != 1 || mn.sent(2, "RENEW 7") < 2 {
		t.Fatalf("node 1: %q; node 2: %q", mn.log[1], mn.log[2])
	}
}

// A lease that cannot re-attach is lost with reattach_failed: when the
// new node has nothing under its secret (LOST), and when it does not
// answer before the lease's deadline, which replies of the old node no
// longer move. Its function's ctx ends, and the hold answers lost.
func TestALeaseThatCannotReattachIsLost(t *testing.T) {
	table := texts(t)
	for name, answer := range map[string]string{
		"nothing under the secret": lostUnderSecret,
		"no answer in time":        silentReply,
	} {
		t.Run(name, func(t *testing.T) {
			expectText(t, table, "reattach_failed", map[string]string{"lock": "l", "key": `"k"`}, ErrLost, cannotReattach(t, answer))
		})
	}
}

const lostUnderSecret = "-LOST lock l: key \"k\": the lease was lost: nothing was handed over under its secret\r\n"

// reattachFailed provokes reattach_failed (texts_test.go).
func reattachFailed(t *testing.T) error { return cannotReattach(t, lostUnderSecret) }

// cannotReattach holds k of lock l on a node that moves it, the next
// node answering REATTACH answer, and answers the hold's error. The
// function's ctx must end within the ttl of the move.
func cannotReattach(t *testing.T, answer string) error {
	const ttl = 300 * time.Millisecond
	mn := newMovingNodes(t, 2, func(mn *movingNodes, try int) string { return answer })
	l := openLock(t, connect(t, mn.addr(0)), "l", TTL(ttl))
	var endedAfter time.Duration
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		mn.moveNow.Store(true)
		select {
		case <-ctx.Done():
			endedAfter = time.Since(time.Unix(0, mn.movedAt.Load()))
		case <-time.After(3 * ttl):
			return errors.New("the lease was not lost")
		}
		return nil
	})
	if endedAfter > ttl {
		t.Errorf("the ctx ended %v after the move (ttl %v)", endedAfter, ttl)
	}
	return err
}

// A lease whose RELEASE is answered MOVED (it moved as the function
// returned, the push unseen) re-attaches and is released at the new node.
func TestAReleaseAnsweredMovedIsReleasedAtTheNewNode(t *testing.T) {
	mn := newMovingNodes(t, 2, func(mn *movingNodes, try int) string { return reattachGrant })
	mn.moveOnRelease.Store(true)
	l := openLock(t, connect(t, mn.addr(0)), "l", TTL(10*time.Second))
	if err := l.Hold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if mn.sent(0, "RELEASE 1") != 1 || mn.sent(1, "REATTACH") != 1 || mn.sent(1, "RELEASE 7") != 1 {
		t.Fatalf("node 0: %q; node 1: %q", mn.log[0], mn.log[1])
	}
}

// waitingNodes: node 0 answers a HOLD with a secret, after holding it
// 200ms, MOVED to node 1 (its line handed over); node 1 answers REATTACH
// as reattach says, HOLD with a grant (lease 8, fence 6).
func waitingNodes(t *testing.T, reattach string) (*fakeCluster, *atomic.Value) {
	secret := &atomic.Value{}
	fc := handoverCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		switch {
		case node == 0 && args[0] == "HOLD" && secretOf(args) != "":
			secret.Store(secretOf(args))
			time.Sleep(200 * time.Millisecond)
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1))
		case node == 1 && args[0] == "REATTACH":
			if want, _ := secret.Load().(string); len(args) != 4 || args[3] != want {
				return lostUnderSecret
			}
			time.Sleep(100 * time.Millisecond)
			return reattach
		case node == 1 && args[0] == "HOLD":
			return "*2\r\n:8\r\n:6\r\n"
		}
		return ""
	})
	return fc, secret
}

// A HOLD waiting with a secret, answered MOVED, re-attaches with that
// secret at the node named and keeps waiting there, in its place: it is
// granted by the REATTACH, and never sent as a HOLD again.
func TestAWaiterReattachesAndKeepsItsPlace(t *testing.T) {
	fc, _ := waitingNodes(t, "*2\r\n:7\r\n:5\r\n")
	l := openLock(t, connect(t, fc.addr(0)), "l", TTL(time.Second))
	var fence uint64
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		fence = lease.Fence
		return nil
	}, Wait(5*time.Second))
	if err != nil || fence != 5 {
		t.Fatalf("%v, fence %d", err, fence)
	}
	if fc.sent(0, "HOLD") != 1 || fc.sent(1, "HOLD") != 0 || fc.sent(1, "REATTACH l k ") != 1 || fc.sent(1, "RELEASE 7") != 1 {
		t.Fatalf("node 0: %q; node 1: %q", fc.log[0], fc.log[1])
	}
	// Its wait ran out at the new node: the REATTACH answers as HOLD does.
	fc, _ = waitingNodes(t, "-INUSE lock l: key \"k\": still held after 5s: in use\r\n")
	l = openLock(t, connect(t, fc.addr(0)), "l", TTL(time.Second))
	if err := l.Hold(context.Background(), "k", nothing, Wait(5*time.Second)); !errors.Is(err, ErrInUse) {
		t.Fatalf("%v", err)
	}
}

// Nothing under the secret at the node a waiting HOLD's MOVED named: the
// MOVED may have been a plain redirection (a stale map) as well as a line
// handed over whose transfer failed, and a MOVED does not say which. The
// hold asks again there with HOLD and the wait it has left, as after any
// MOVED.
func TestAWaiterWithNothingUnderItsSecretAsksAgain(t *testing.T) {
	fc, _ := waitingNodes(t, lostUnderSecret)
	l := openLock(t, connect(t, fc.addr(0)), "l", TTL(time.Second))
	var fence uint64
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		fence = lease.Fence
		return nil
	}, Wait(5*time.Second))
	if err != nil || fence != 6 {
		t.Fatalf("%v, fence %d", err, fence)
	}
	if fc.sent(1, "REATTACH") != 1 || fc.sent(1, "HOLD l k WAIT 4") != 1 || fc.sent(1, "RELEASE 8") != 1 {
		t.Fatalf("node 1: %q", fc.log[1])
	}
}

// The new node answers a waiter's REATTACH, before it serves the slot,
// with MOVED to a node that is gone (the one that handed the line over):
// the waiter asks the map, which names the new node, and re-attaches
// there after a pause, keeping its place.
func TestAWaiterReattachesPastAMovedToANodeGone(t *testing.T) {
	var tries atomic.Int32
	var fc *fakeCluster
	fc = handoverCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		switch {
		case node == 0 && args[0] == "HOLD" && secretOf(args) != "":
			time.Sleep(100 * time.Millisecond)
			fc.setRanges(slotRange{0, slotCount - 1, 1})
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1))
		case node == 1 && args[0] == "REATTACH" && tries.Add(1) == 1:
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(2))
		case node == 1 && args[0] == "REATTACH":
			return "*2\r\n:7\r\n:5\r\n"
		}
		return ""
	})
	fc.addUnreachable(t)
	l := openLock(t, connect(t, fc.addr(0)), "l", TTL(time.Second))
	if err := l.Hold(context.Background(), "k", nothing, Wait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if fc.sent(1, "REATTACH l k ") != 2 || fc.sent(1, "HOLD") != 0 || fc.sent(1, "RELEASE 7") != 1 {
		t.Fatalf("node 1: %q", fc.log[1])
	}
}
