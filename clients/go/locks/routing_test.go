package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Cluster routing against scripted nodes: what a real cluster does only
// in a failover (MOVED, CLUSTERDOWN, a node gone), played at will.

// fakeCluster is a few scripted nodes that answer CLUSTER SLOTS with the
// ranges the test sets, HELLO, PING, RENEW and RELEASE as a server does,
// and the rest as script says (a HOLD unanswered by script is granted, an
// INSPECT answered null). Every command is recorded per node.
type fakeCluster struct {
	nodes []*fakeNode

	mu sync.Mutex
	// handover: HELLO says handover = 1 (a node that can hand leases
	// over, see handover_test.go).
	handover bool
	ranges   []slotRange
	log      [][]string
	muted    []bool
}

// slotRange: node serves slots start to end.
type slotRange struct{ start, end, node int }

func newFakeCluster(t *testing.T, n int, script func(fc *fakeCluster, node int, args []string) string) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{log: make([][]string, n), muted: make([]bool, n)}
	for i := 0; i < n; i++ {
		i := i
		fc.nodes = append(fc.nodes, startFakeNode(t, func(args []string) string {
			fc.mu.Lock()
			fc.log[i] = append(fc.log[i], strings.Join(args, " "))
			muted, handover := fc.muted[i], fc.handover
			fc.mu.Unlock()
			if muted {
				return silentReply
			}
			if args[0] == "HELLO" && handover {
				return helloHandoverReply
			}
			if args[0] == "HELLO" {
				return helloReply
			}
			if script != nil {
				if reply := script(fc, i, args); reply != "" {
					return reply
				}
			}
			return fc.usual(args)
		}))
	}
	return fc
}

func (fc *fakeCluster) usual(args []string) string {
	switch args[0] {
	case "CLUSTER":
		return fc.slotsReply()
	case "HOLD", "TRYHOLD":
		return grantReply
	case "INSPECT":
		return "_\r\n"
	case "PING":
		return "+PONG\r\n"
	case "RENEW", "RELEASE":
		return "+OK\r\n"
	}
	return "-ERR unknown command\r\n"
}

// setRanges: what CLUSTER SLOTS answers from now on.
func (fc *fakeCluster) setRanges(ranges ...slotRange) {
	fc.mu.Lock()
	fc.ranges = ranges
	fc.mu.Unlock()
}

// slotsReply is CLUSTER SLOTS's answer for the ranges set, as Redis
// writes it.
func (fc *fakeCluster) slotsReply() string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(fc.ranges))
	for _, r := range fc.ranges {
		port := fc.nodes[r.node].addr[strings.LastIndexByte(fc.nodes[r.node].addr, ':')+1:]
		id := strings.Repeat(strconv.Itoa(r.node), 40)
		fmt.Fprintf(&b, "*3\r\n:%d\r\n:%d\r\n*3\r\n$9\r\n127.0.0.1\r\n:%s\r\n$40\r\n%s\r\n", r.start, r.end, port, id)
	}
	return b.String()
}

func (fc *fakeCluster) addr(node int) string { return fc.nodes[node].addr }

// addUnreachable adds a node that nothing listens at (refusedAddr) for the
// ranges to name, and answers its index.
func (fc *fakeCluster) addUnreachable(t *testing.T) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.nodes = append(fc.nodes, &fakeNode{addr: refusedAddr(t)})
	fc.log = append(fc.log, nil)
	fc.muted = append(fc.muted, false)
	return len(fc.nodes) - 1
}

// mute: from now on node answers nothing at all, HELLO included, as a
// stopped process (it still takes connections).
func (fc *fakeCluster) mute(node int) {
	fc.mu.Lock()
	fc.muted[node] = true
	fc.mu.Unlock()
}

// sent counts the commands node was sent that start with prefix.
func (fc *fakeCluster) sent(node int, prefix string) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n := 0
	for _, line := range fc.log[node] {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// halves: node 0 serves the slots below 8192, node 1 the rest.
var halves = []slotRange{{0, 8191, 0}, {8192, slotCount - 1, 1}}

// keyIn answers a key whose slot is in [from, to].
func keyIn(from, to int) string {
	for i := 0; ; i++ {
		if k := "k" + strconv.Itoa(i); slotOf(k) >= from && slotOf(k) <= to {
			return k
		}
	}
}

func (s *Store) redirects() int {
	s.router.mu.Lock()
	defer s.router.mu.Unlock()
	return s.router.redirects
}

// Each command goes to the node of its key's slot as CLUSTER SLOTS
// mapped it, with no MOVED needed; the token of the first address is
// the one every node is given.
func TestEachKeyGoesToTheNodeOfItsSlot(t *testing.T) {
	fc := newFakeCluster(t, 2, nil)
	fc.setRanges(halves...)
	store := connect(t, "redis://:tok@"+fc.addr(0)+","+fc.addr(1))
	l := openLock(t, store, "l")
	low, high := keyIn(0, 8191), keyIn(8192, slotCount-1)
	ctx := context.Background()
	for _, k := range []string{low, high} {
		if err := l.Hold(ctx, k, nothing); err != nil {
			t.Fatal(err)
		}
		if ok, err := l.TryHold(ctx, k, nothing); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if info, err := l.Inspect(ctx, k); info != nil || err != nil {
			t.Fatal(info, err)
		}
	}
	for node, k := range []string{low, high} {
		for _, cmd := range []string{"HOLD l " + k + " ", "TRYHOLD l " + k + " ", "INSPECT l " + k} {
			if n := fc.sent(node, cmd); n != 1 {
				t.Errorf("node %d was sent %q %d times", node, cmd, n)
			}
		}
		if n := fc.sent(node, "HOLD") + fc.sent(node, "TRYHOLD") + fc.sent(node, "INSPECT"); n != 3 {
			t.Errorf("node %d was sent %d commands for keys", node, n)
		}
		if n := fc.sent(node, "HELLO 3 AUTH default tok"); n < 1 {
			t.Errorf("node %d was not given the token", node)
		}
	}
	if n := store.redirects(); n != 0 {
		t.Fatalf("%d MOVED followed", n)
	}
}

// A MOVED answer is followed to the node it names; the slot is
// remembered, and the whole map is refreshed in the background.
func TestAMovedAnswerIsFollowedAndTheMapRefreshed(t *testing.T) {
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if node == 0 && args[0] == "HOLD" {
			fc.setRanges(slotRange{0, slotCount - 1, 1})
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1))
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	store := connect(t, fc.addr(0))
	l := openLock(t, store, "l")
	if err := l.Hold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if fc.sent(0, "HOLD") != 1 || fc.sent(1, "HOLD l k ") != 1 || store.redirects() != 1 {
		t.Fatalf("HOLDs: node 0 %d, node 1 %d; %d MOVED followed", fc.sent(0, "HOLD"), fc.sent(1, "HOLD"), store.redirects())
	}
	waitUntil(t, "the map refreshed", 5*time.Second, func() bool {
		store.router.mu.Lock()
		defer store.router.mu.Unlock()
		return store.router.slots[slotOf("other")] == fc.addr(1)
	})
	for _, k := range []string{"k", "other"} {
		if err := l.Hold(context.Background(), k, nothing); err != nil {
			t.Fatal(err)
		}
	}
	if fc.sent(0, "HOLD") != 1 || fc.sent(1, "HOLD") != 3 || store.redirects() != 1 {
		t.Fatalf("HOLDs: node 0 %d, node 1 %d", fc.sent(0, "HOLD"), fc.sent(1, "HOLD"))
	}
}

// A lease counts from the HOLD that was granted, not from the first one
// sent: a MOVED that came late leaves the lease its whole ttl.
func TestALeaseCountsFromTheHoldThatWasGranted(t *testing.T) {
	const ttl = 300 * time.Millisecond
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if node == 0 && args[0] == "HOLD" {
			time.Sleep(ttl * 2 / 3)
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1))
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	l := openLock(t, connect(t, fc.addr(0)), "l", TTL(ttl))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		// Counted from the first HOLD, the lease would be lost by now
		// (its first RENEW goes out a third of the ttl after the grant).
		time.Sleep(ttl * 2 / 3)
		if ctx.Err() != nil || lease.Err() != nil {
			return fmt.Errorf("lost: %v", lease.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CLUSTERDOWN has the map refreshed and the command sent again after a
// pause, to the node the new map names.
func TestClusterDownIsRetriedOnTheRefreshedMap(t *testing.T) {
	var downs int32
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if node == 0 && args[0] == "HOLD" {
			if atomic.AddInt32(&downs, 1) == 2 {
				fc.setRanges(slotRange{0, slotCount - 1, 1})
			}
			return "-CLUSTERDOWN Hash slot not served\r\n"
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	l := openLock(t, connect(t, fc.addr(0)), "l")
	start := time.Now()
	if err := l.Hold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*clusterDownPause {
		t.Fatalf("two CLUSTERDOWN answers retried within %v", took)
	}
	if fc.sent(0, "HOLD") != 2 || fc.sent(1, "HOLD") != 1 || fc.sent(0, "CLUSTER SLOTS") != 3 {
		t.Fatalf("HOLDs: node 0 %d, node 1 %d; CLUSTER SLOTS %d", fc.sent(0, "HOLD"), fc.sent(1, "HOLD"), fc.sent(0, "CLUSTER"))
	}
}

// INSPECT follows MOVED as HOLD does.
func TestInspectFollowsMoved(t *testing.T) {
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		switch {
		case node == 0 && args[0] == "INSPECT":
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1))
		case node == 1 && args[0] == "INSPECT":
			return "%2\r\n+held\r\n:1\r\n+fence\r\n:7\r\n"
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	info, err := openLock(t, connect(t, fc.addr(0)), "l").Inspect(context.Background(), "k")
	if err != nil || info == nil || !info.Held || info.Fence != 7 {
		t.Fatalf("%+v %v", info, err)
	}
}

// A held lease whose node's connection drops is lost as on a single
// server, and the map is refreshed: the next hold goes to the node that
// serves the key now.
func TestADroppedNodeHasTheMapRefreshed(t *testing.T) {
	fc := newFakeCluster(t, 2, nil)
	fc.setRanges(halves...)
	store := connect(t, fc.addr(0)+","+fc.addr(1))
	l := openLock(t, store, "l")
	k := keyIn(8192, slotCount-1)
	granted := make(chan struct{})
	held := holdAsync(context.Background(), l, k, func(ctx context.Context, lease *Lease) error {
		close(granted)
		<-ctx.Done()
		return nil
	})
	within(t, "the grant on node 1", 5*time.Second, granted)
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	fc.nodes[1].kill()
	want := `lock l: key "` + k + `": the lease was lost: its connection to the server closed`
	if err := within(t, "the lost hold", 5*time.Second, held); !errors.Is(err, ErrLost) || err.Error() != want {
		t.Fatalf("%v", err)
	}
	waitUntil(t, "the map refreshed", 5*time.Second, func() bool {
		store.router.mu.Lock()
		defer store.router.mu.Unlock()
		return store.router.slots[slotOf(k)] == fc.addr(0)
	})
	if err := l.Hold(context.Background(), k, nothing); err != nil {
		t.Fatal(err)
	}
	if fc.sent(0, "HOLD l "+k+" ") != 1 {
		t.Fatalf("node 0 was sent %d HOLDs", fc.sent(0, "HOLD"))
	}
}

// A hold whose node cannot be reached fails as on a single server,
// naming that node, once the map was refreshed: the next hold goes to the
// node that serves the key now.
func TestAnUnreachableNodeFailsTheHoldAndTheNextGoesToTheNewOwner(t *testing.T) {
	fc := newFakeCluster(t, 1, nil)
	gone := fc.addUnreachable(t) // the store dials a node only once it sends it something
	fc.setRanges(slotRange{0, 8191, 0}, slotRange{8192, slotCount - 1, gone})
	l := openLock(t, connect(t, fc.addr(0)), "l")
	k := keyIn(8192, slotCount-1)
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	err := l.Hold(context.Background(), k, nothing)
	expectText(t, texts(t), "cannot_connect", map[string]string{"hostport": fc.addr(gone)}, ErrClosed, err)
	if err := l.Hold(context.Background(), k, nothing); err != nil {
		t.Fatal(err)
	}
}

// Connect tries the addresses in order: the first that answers wins; none
// answers the last one's error; a bad one fails before any is tried.
func TestConnectTriesTheAddressesInOrder(t *testing.T) {
	table := texts(t)
	ctx := context.Background()
	dead1, dead2 := refusedAddr(t), refusedAddr(t)
	fc := newFakeCluster(t, 1, nil)
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	store := connect(t, dead1+","+fc.addr(0))
	if err := openLock(t, store, "l").Hold(ctx, "k", nothing); err != nil || store.router == nil {
		t.Fatalf("%v (cluster mode %v)", err, store.router != nil)
	}
	_, err := Connect(ctx, dead1+","+dead2)
	expectText(t, table, "cannot_connect", map[string]string{"hostport": dead2}, ErrClosed, err)
	_, err = Connect(ctx, fc.addr(0)+",nope://x")
	expectText(t, table, "bad_address", map[string]string{"address": `"nope://x"`}, ErrInvalid, err)
	_, err = Connect(ctx, fc.addr(0)+",")
	expectText(t, table, "bad_address", map[string]string{"address": `""`}, ErrInvalid, err)
	if n := fc.sent(0, "HELLO"); n != 1 {
		t.Fatalf("%d HELLOs", n)
	}
}

// A server that answers CLUSTER SLOTS with an error is a single server:
// asked once, at Connect, and every command goes to it.
func TestASingleServerIsAskedForTheMapOnce(t *testing.T) {
	var mu sync.Mutex
	clusters := 0
	addr := fakeServer(t, func(args []string) string {
		switch args[0] {
		case "HELLO":
			return helloReply
		case "CLUSTER":
			mu.Lock()
			clusters++
			mu.Unlock()
			return singleNodeReply
		case "HOLD":
			return grantReply
		}
		return "+OK\r\n"
	})
	store := connect(t, addr)
	l := openLock(t, store, "l")
	for i := 0; i < 3; i++ {
		if err := l.Hold(context.Background(), i, nothing); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if clusters != 1 || store.router != nil {
		t.Fatalf("CLUSTER asked %d times; cluster mode %v", clusters, store.router != nil)
	}
}

// movedLoop provokes moved_loop: two nodes that send the key to each
// other. The HOLD was sent once and then 5 times more.
func movedLoop(t *testing.T) error {
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if args[0] == "HOLD" {
			return fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1-node))
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	err := openLock(t, connect(t, fc.addr(0)), "inv").Hold(context.Background(), 9, nothing)
	if sent := fc.sent(0, "HOLD") + fc.sent(1, "HOLD"); sent != 1+maxRedirects {
		t.Errorf("the HOLD was sent %d times", sent)
	}
	return err
}

// slotUnserved provokes slot_unserved: a node that answers CLUSTERDOWN
// every time. The HOLD was sent 10 times, the map refreshed before each
// resend, a pause apart.
func slotUnserved(t *testing.T) error {
	fc := newFakeCluster(t, 1, func(_ *fakeCluster, node int, args []string) string {
		if args[0] == "HOLD" {
			return "-CLUSTERDOWN Hash slot not served\r\n"
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	start := time.Now()
	err := openLock(t, connect(t, fc.addr(0)), "inv").Hold(context.Background(), "foo", nothing)
	if took := time.Since(start); took < (clusterDownTries-1)*clusterDownPause {
		t.Errorf("gave up after %v", took)
	}
	if n := fc.sent(0, "HOLD"); n != clusterDownTries {
		t.Errorf("the HOLD was sent %d times", n)
	}
	if n := fc.sent(0, "CLUSTER SLOTS"); n != clusterDownTries {
		t.Errorf("CLUSTER SLOTS was asked %d times", n)
	}
	return err
}

// Slots are Redis Cluster's, checked against Redis's own vectors (the
// slots worked out bit by bit from CRC16-XMODEM).
func TestSlotsAreRedisClusters(t *testing.T) {
	if crc := crc16("123456789"); crc != 0x31C3 {
		t.Fatalf("CRC16 %#x", crc)
	}
	cases := []struct {
		key  string
		slot int
	}{
		{"123456789", 12739},
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363}, // an empty tag: the whole key ("bar" alone is 5061)
		{"foo{{bar}}zap", 4015},
		{"{bar", 4015},
		{"x{y}", slotOf("y")},
	}
	for _, c := range cases {
		if got := slotOf(c.key); got != c.slot {
			t.Errorf("slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
	if slotOf("{user1000}.following") == slotOf("user1000.following") {
		t.Error("the hash tag was not used")
	}
}

func TestMovedAnswersAreRead(t *testing.T) {
	cases := []struct {
		line, node string
		slot       int
		ok         bool
	}{
		{"MOVED 12182 127.0.0.1:7002", "127.0.0.1:7002", 12182, true},
		{"MOVED 0 ::1:7002", "[::1]:7002", 0, true},
		{"MOVED 16383 [::1]:7002", "[::1]:7002", 16383, true},
		{"MOVED 16384 127.0.0.1:7002", "", 0, false},
		{"MOVED 1 127.0.0.1", "", 0, false},
		{"MOVED 1 :7002", "", 0, false},
		{"MOVED 1 127.0.0.1:0", "", 0, false},
		{"MOVED x 127.0.0.1:7002", "", 0, false},
		{"ASK 1 127.0.0.1:7002", "", 0, false},
	}
	for _, c := range cases {
		slot, node, ok := parseMoved(c.line)
		if ok != c.ok || ok && (slot != c.slot || node != c.node) {
			t.Errorf("%q: %d %q %v", c.line, slot, node, ok)
		}
	}
	var r router
	if r.redirection("CLUSTERDOWN Hash slot not served") == nil || r.redirection("MOVED 1 h:1") == nil ||
		r.redirection("ERR unknown") != nil || r.redirection("INUSE x") != nil {
		t.Error("redirections read wrong")
	}
	if (*router)(nil).redirection("MOVED 1 h:1") != nil {
		t.Error("a single server's MOVED was followed")
	}
}

// CLUSTER SLOTS's ranges, an empty host being the node asked; entries
// that do not read are skipped, unserved slots left empty.
func TestClusterSlotsAnswersAreRead(t *testing.T) {
	bulk := func(s string) value { return value{kind: '$', text: s} }
	num := func(n int64) value { return value{kind: ':', num: n} }
	entry := func(start, end int64, host string, port int64) value {
		node := value{kind: '*', items: []value{bulk(host), num(port), bulk(strings.Repeat("a", 40))}}
		return value{kind: '*', items: []value{num(start), num(end), node}}
	}
	v := value{kind: '*', items: []value{
		entry(0, 99, "10.0.0.1", 7001),
		entry(100, 199, "", 7002),
		entry(300, 200, "10.0.0.3", 7003),
		entry(200, 16384, "10.0.0.3", 7003),
		entry(16000, 16383, "::1", 7004),
		{kind: '*', items: []value{num(1)}},
	}}
	slots := slotsOf(v, "asked")
	want := map[int]string{0: "10.0.0.1:7001", 99: "10.0.0.1:7001", 100: "asked:7002", 199: "asked:7002",
		200: "", 15999: "", 16000: "[::1]:7004", 16383: "[::1]:7004"}
	for slot, node := range want {
		if slots[slot] != node {
			t.Errorf("slot %d: %q, want %q", slot, slots[slot], node)
		}
	}
}

// thirdsOneKeyDownTwice: three nodes splitting the slots in thirds (node
// 0's range first in CLUSTER SLOTS), and a key on node 2 that answers
// CLUSTERDOWN twice, then is granted.
func thirdsOneKeyDownTwice(t *testing.T) (*fakeCluster, string) {
	var downs int32
	fc := newFakeCluster(t, 3, func(fc *fakeCluster, node int, args []string) string {
		if node == 2 && args[0] == "HOLD" && atomic.AddInt32(&downs, 1) <= 2 {
			return "-CLUSTERDOWN Hash slot not served\r\n"
		}
		return ""
	})
	fc.setRanges(slotRange{0, 5460, 0}, slotRange{5461, 10922, 1}, slotRange{10923, slotCount - 1, 2})
	return fc, keyIn(10923, slotCount-1)
}

// holdThroughTwoRefreshes holds key (CLUSTERDOWN twice: the map refreshed
// twice) and checks the time it took: one silent node given up after
// texts.json's map_refresh_node_timeout_ms (the connect timeout is 10 s),
// then asked last, so not waited for again.
func holdThroughTwoRefreshes(t *testing.T, store *Store, key string) {
	t.Helper()
	given := time.Duration(ruleNumber(t, "map_refresh_node_timeout_ms")) * time.Millisecond
	pause := time.Duration(ruleNumber(t, "cluster_down_pause_ms")) * time.Millisecond
	start := time.Now()
	if err := openLock(t, store, "frozen").Hold(context.Background(), key, nothing); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < given+2*pause || took >= given+1500*time.Millisecond {
		t.Fatalf("the hold took %v", took)
	}
}

// A node silent to CLUSTER SLOTS, first in the map, holds up a refresh
// 2 s at most, and is asked last after that.
func TestANodeSilentToClusterSlotsHoldsUpARefreshTwoSecondsAtMost(t *testing.T) {
	fc, key := thirdsOneKeyDownTwice(t)
	// The node connected through, first in the map, with an idle connection.
	store := connect(t, fc.addr(0))
	fc.mute(0)
	holdThroughTwoRefreshes(t, store, key)
	// Asked at connect and by the first refresh (given up); the second
	// asked node 1 first.
	if a, b := fc.sent(0, "CLUSTER SLOTS"), fc.sent(1, "CLUSTER SLOTS"); a != 2 || b != 2 {
		t.Fatalf("CLUSTER SLOTS: node 0 %d, node 1 %d", a, b)
	}
}

// A node that takes connections and answers nothing, first in the map,
// holds up a refresh 2 s at most, dialling included.
func TestANodeThatAnswersNothingHoldsUpARefreshTwoSecondsAtMost(t *testing.T) {
	fc, key := thirdsOneKeyDownTwice(t)
	// Connected through node 1: the store has no connection to node 0
	// before the map is refreshed.
	fc.mute(0)
	store := connect(t, fc.addr(1))
	holdThroughTwoRefreshes(t, store, key)
	if hello, slots := fc.sent(0, "HELLO"), fc.sent(0, "CLUSTER"); hello != 1 || slots != 0 {
		t.Fatalf("node 0: HELLO %d, CLUSTER %d", hello, slots)
	}
	if n := fc.sent(1, "CLUSTER SLOTS"); n != 3 {
		t.Fatalf("node 1: CLUSTER SLOTS %d", n)
	}
}

// holdWaits records the WAIT argument of each HOLD a fake cluster is sent.
type holdWaits struct {
	mu    sync.Mutex
	waits []int
}

func (w *holdWaits) note(t *testing.T, args []string) {
	if len(args) < 5 || args[3] != "WAIT" {
		t.Errorf("a HOLD without WAIT: %q", args)
		return
	}
	ms, err := strconv.Atoi(args[4])
	if err != nil {
		t.Errorf("a HOLD's WAIT %q", args[4])
	}
	w.mu.Lock()
	w.waits = append(w.waits, ms)
	w.mu.Unlock()
}

func (w *holdWaits) all() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.waits...)
}

// A hold's wait runs from its call: a HOLD sent again after a CLUSTERDOWN
// carries the wait left, less at least the pause before it, not the
// whole wait again.
func TestAHoldSentAgainCarriesTheWaitLeft(t *testing.T) {
	pause := ruleNumber(t, "cluster_down_pause_ms")
	var waits holdWaits
	var downs int32
	fc := newFakeCluster(t, 1, func(fc *fakeCluster, node int, args []string) string {
		if args[0] == "HOLD" {
			waits.note(t, args)
			if atomic.AddInt32(&downs, 1) <= 2 {
				return "-CLUSTERDOWN Hash slot not served\r\n"
			}
		}
		return ""
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	l := openLock(t, connect(t, fc.addr(0)), "l")
	if err := l.Hold(context.Background(), "k", nothing, Wait(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := waits.all()
	if len(got) != 3 || got[0] != 2000 {
		t.Fatalf("the HOLDs' WAITs: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] > got[i-1]-pause {
			t.Fatalf("the HOLDs' WAITs %v: not each the last less the pause (%d ms) at least", got, pause)
		}
	}
}

// A hold is bounded as a whole: CLUSTERDOWN answers that each come late
// are retried only until its wait plus its grace from the call, then it
// fails wait_silent (not slot_unserved after 10 slow tries); the HOLDs
// sent once the wait is spent carry WAIT 0.
func TestAHoldIsBoundedAsAWhole(t *testing.T) {
	const wait, ttl, late = 600 * time.Millisecond, time.Second, 400 * time.Millisecond
	var waits holdWaits
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if args[0] == "HOLD" {
			waits.note(t, args)
			time.Sleep(late)
			return "-CLUSTERDOWN Hash slot not served\r\n"
		}
		return ""
	})
	fc.setRanges(halves...)
	l := openLock(t, connect(t, fc.addr(0)+","+fc.addr(1)), "inv", TTL(ttl))
	start := time.Now()
	err := l.Hold(context.Background(), "k", nothing, Wait(wait))
	took := time.Since(start)
	vars := map[string]string{"lock": "inv", "key": `"k"`, "wait": "600ms", "ttl": "1s"}
	expectText(t, texts(t), "wait_silent", vars, ErrClosed, err)
	if took < wait+ttl-100*time.Millisecond || took >= 3*time.Second {
		t.Fatalf("the hold gave up after %v", took)
	}
	got := waits.all()
	t.Logf("gave up after %v; the HOLDs' WAITs %v", took, got)
	if len(got) < 3 || got[0] != 600 || got[len(got)-1] != 0 {
		t.Fatalf("the HOLDs' WAITs: %v", got)
	}
}
