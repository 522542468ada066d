package locks

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// Permits against a real server: semaphores, read-write locks, the line's
// order, TryHold, the server's texts, INSPECT, and a dead holder's
// permits. Every "not granted" is asserted once the server's own counts
// (STATS, INSPECT) say the state the test looks at is reached.

// permitHold is a hold run in a goroutine that keeps the key until
// release, so that a test can watch when it is granted.
type permitHold struct {
	granted chan *Lease
	letGo   chan struct{}
	once    sync.Once
	done    <-chan error
	lease   *Lease
}

// startHold starts a hold of key (waiting up to 30s) and answers at once.
func startHold(t testing.TB, l *Lock, key any, opts ...HoldOption) *permitHold {
	h := &permitHold{granted: make(chan *Lease, 1), letGo: make(chan struct{})}
	opts = append([]HoldOption{Wait(30 * time.Second)}, opts...)
	h.done = holdAsync(context.Background(), l, key, func(ctx context.Context, lease *Lease) error {
		h.granted <- lease
		<-h.letGo
		return nil
	}, opts...)
	t.Cleanup(h.letItGo)
	return h
}

// grant waits for the hold's grant and answers its lease.
func (h *permitHold) grant(t testing.TB) *Lease {
	t.Helper()
	if h.lease == nil {
		h.lease = awaitGrant(t, "the key", h.granted, h.done)
	}
	return h.lease
}

// notGranted fails the test if the hold has been granted, or has ended.
func (h *permitHold) notGranted(t testing.TB, what string) {
	t.Helper()
	select {
	case lease := <-h.granted:
		t.Fatalf("%s was granted (fence %d)", what, lease.Fence)
	case err := <-h.done:
		t.Fatalf("%s ended: %v", what, err)
	default:
	}
}

func (h *permitHold) letItGo() { h.once.Do(func() { close(h.letGo) }) }

// release lets the key go and waits until the hold has returned (its
// RELEASE answered), failing the test if the hold failed.
func (h *permitHold) release(t testing.TB) {
	t.Helper()
	h.grant(t)
	h.letItGo()
	if err := within(t, "the hold's end", 10*time.Second, h.done); err != nil {
		t.Fatal(err)
	}
}

// inspect answers the key's snapshot, failing the test on an error or
// no state.
func inspect(t testing.TB, l *Lock, key any) *KeyInfo {
	t.Helper()
	info, err := l.Inspect(context.Background(), key)
	if err != nil || info == nil {
		t.Fatalf("inspect %v: %+v, %v", key, info, err)
	}
	return info
}

// expectCounts checks the key's holders, permits held and waiters.
func expectCounts(t testing.TB, l *Lock, key any, holders, permits, waiters int) *KeyInfo {
	t.Helper()
	info := inspect(t, l, key)
	if info.Holders != holders || info.PermitsHeld != permits || info.Waiters != waiters || info.Held != (holders > 0) {
		t.Fatalf("held %v by %d holders with %d permits, %d waiting; want %d, %d, %d",
			info.Held, info.Holders, info.PermitsHeld, info.Waiters, holders, permits, waiters)
	}
	return info
}

func TestASemaphoreOfThreeHoldsThreeAtOnceAndTheFourthWaits(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "providers", Permits(3))
	if l.Permits() != 3 {
		t.Fatalf("Permits() = %d", l.Permits())
	}
	var holds []*permitHold
	var last uint64
	for i := 0; i < 3; i++ {
		h := startHold(t, l, "stripe")
		lease := h.grant(t) // while the ones before it still hold
		if lease.Permits() != 1 || lease.Fence <= last {
			t.Fatalf("hold %d: %d permits, fence %d after %d", i+1, lease.Permits(), lease.Fence, last)
		}
		last = lease.Fence
		holds = append(holds, h)
	}
	fourth := startHold(t, l, "stripe")
	waitersAre(t, store, "providers", 1)
	fourth.notGranted(t, "the fourth while three hold")
	expectCounts(t, l, "stripe", 3, 3, 1)

	holds[1].release(t)
	if lease := fourth.grant(t); lease.Fence <= last {
		t.Fatalf("the fourth's fence %d after %d", lease.Fence, last)
	}
	expectCounts(t, l, "stripe", 3, 3, 0)
	for _, h := range []*permitHold{holds[0], holds[2], fourth} {
		h.release(t)
	}
}

// Readers take one permit, writers all of them: readers share, a writer
// waits for them, and nobody overtakes a waiting writer, even a reader
// whose permit would fit; the writer's release grants every reader at the
// head of the line, up to the next writer.
func TestReadersShareAndNobodyOvertakesAWaitingWriter(t *testing.T) {
	store := startStore(t)
	docs := openLock(t, store, "docs", Permits(8))
	r1 := startHold(t, docs, "d")
	r1.grant(t)
	r2 := startHold(t, docs, "d") // granted while r1 holds
	if r1.grant(t).Permits() != 1 || r2.grant(t).Fence <= r1.grant(t).Fence {
		t.Fatalf("readers: %d permits, fences %d, %d", r1.grant(t).Permits(), r1.grant(t).Fence, r2.grant(t).Fence)
	}
	// The line, in this order: w, r3, r4, w2, r5.
	w := startHold(t, docs, "d", Exclusive())
	waitersAre(t, store, "docs", 1)
	r3 := startHold(t, docs, "d")
	waitersAre(t, store, "docs", 2)
	r4 := startHold(t, docs, "d")
	waitersAre(t, store, "docs", 3)
	w2 := startHold(t, docs, "d", Exclusive())
	waitersAre(t, store, "docs", 4)
	r5 := startHold(t, docs, "d")
	waitersAre(t, store, "docs", 5)
	r3.notGranted(t, "a reader behind a waiting writer (6 permits free)")

	r1.release(t)
	expectCounts(t, docs, "d", 1, 1, 5)
	w.notGranted(t, "the writer while a reader holds")
	r2.release(t)
	lease := w.grant(t)
	if lease.Permits() != 8 || lease.Fence <= r2.grant(t).Fence {
		t.Fatalf("the writer: %d permits, fence %d after %d", lease.Permits(), lease.Fence, r2.grant(t).Fence)
	}
	expectCounts(t, docs, "d", 1, 8, 4)

	w.release(t)
	f3, f4 := r3.grant(t).Fence, r4.grant(t).Fence // both, neither let go
	if f3 <= lease.Fence || f4 <= f3 {
		t.Fatalf("fences: writer %d, then readers %d, %d", lease.Fence, f3, f4)
	}
	expectCounts(t, docs, "d", 2, 2, 2)
	w2.notGranted(t, "the second writer while two readers hold")
	r5.notGranted(t, "a reader behind the second writer")

	r3.release(t)
	expectCounts(t, docs, "d", 1, 1, 2)
	r4.release(t)
	if f := w2.grant(t).Fence; f <= f4 {
		t.Fatalf("the second writer's fence %d after %d", f, f4)
	}
	r5.notGranted(t, "a reader while the second writer holds")
	w2.release(t)
	if f := r5.grant(t).Fence; f <= w2.grant(t).Fence {
		t.Fatalf("the last reader's fence %d after %d", f, w2.grant(t).Fence)
	}
	r5.release(t)
}

// tryHold runs TryHold with a function that records the lease's permits
// and the key's holders as INSPECT sees them while it holds.
func tryHold(t *testing.T, l *Lock, key any, opts ...HoldOption) (acquired bool, permits, holders int) {
	t.Helper()
	acquired, err := l.TryHold(context.Background(), key, func(ctx context.Context, lease *Lease) error {
		permits = lease.Permits()
		holders = inspect(t, l, key).Holders
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return acquired, permits, holders
}

func TestTryHoldTakesOnlyWhenThePermitsFitAndNobodyWaits(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "try", Permits(3))
	two := startHold(t, l, "k", Take(2))
	if p := two.grant(t).Permits(); p != 2 {
		t.Fatalf("Take(2) holds %d permits", p)
	}
	for _, opts := range [][]HoldOption{{Take(2)}, {Exclusive()}, {Take(1), Exclusive()}} {
		if ok, _, _ := tryHold(t, l, "k", opts...); ok {
			t.Fatalf("TryHold %d options acquired with 1 permit free", len(opts))
		}
	}
	if ok, permits, holders := tryHold(t, l, "k"); !ok || permits != 1 || holders != 2 {
		t.Fatalf("TryHold of the permit left: %v, %d permits, %d holders", ok, permits, holders)
	}

	waiter := startHold(t, l, "k", Take(2))
	waitersAre(t, store, "try", 1)
	if ok, _, _ := tryHold(t, l, "k"); ok {
		t.Fatal("TryHold acquired the free permit while a hold waits for two")
	}
	two.release(t)
	waiter.grant(t)
	if ok, permits, holders := tryHold(t, l, "k", Exclusive(), Take(1)); !ok || permits != 1 || holders != 2 {
		t.Fatalf("TryHold (Take given last) with nobody waiting: %v, %d permits, %d holders", ok, permits, holders)
	}
	waiter.release(t)
	if ok, permits, holders := tryHold(t, l, "k", Take(2), Exclusive()); !ok || permits != 3 || holders != 1 {
		t.Fatalf("TryHold (Exclusive given last) of a free key: %v, %d permits, %d holders", ok, permits, holders)
	}
}

func TestBadPermitCountsAnswerTheServersTexts(t *testing.T) {
	store := startStore(t)
	ctx := context.Background()
	expect := func(what string, err error, want string) {
		t.Helper()
		var e *Error
		if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) || !errors.As(err, &e) || e.Kind != KindInvalid {
			t.Errorf("%s: got %v, want %s", what, err, want)
		}
	}
	docs := openLock(t, store, "docs", Permits(1024))
	held := startHold(t, docs, "a")
	held.grant(t) // the server knows the lock now, with 1024 permits
	other := openLock(t, store, "docs", Permits(8))
	want := "lock docs: opened with 1024 permits, not 8: invalid"
	expect("Hold with another count", other.Hold(ctx, "b", nothing), want)
	_, err := other.TryHold(ctx, "b", nothing)
	expect("TryHold with another count", err, want)
	held.release(t)

	providers := openLock(t, store, "providers", Permits(5))
	expect("Take(6)", providers.Hold(ctx, "stripe", nothing, Take(6)),
		`lock providers: key "stripe": 6 permits asked of a lock of 5: invalid`)
	_, err = providers.TryHold(ctx, "stripe", nothing, Take(0))
	expect("Take(0)", err, `lock providers: key "stripe": 0 permits asked of a lock of 5: invalid`)

	// OpenLock leaves the count to the server: the hold fails.
	zero, err := OpenLock(store, "zero", Permits(0))
	if err != nil {
		t.Fatalf("OpenLock with Permits(0): %v", err)
	}
	expect("Permits(0)", zero.Hold(ctx, "k", nothing), "lock zero: a lock has 1 to 1000000 permits, not 0: invalid")
	big := openLock(t, store, "big", Permits(1000001))
	_, err = big.TryHold(ctx, "k", nothing)
	expect("Permits(1000001)", err, "lock big: a lock has 1 to 1000000 permits, not 1000001: invalid")
}

func TestInspectShowsEveryHolderWithItsFenceAndPermits(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "insp", Permits(5))
	h1 := startHold(t, l, "k", Take(2))
	l1 := h1.grant(t)
	h2 := startHold(t, l, "k")
	l2 := h2.grant(t)
	writer := startHold(t, l, "k", Exclusive())
	waitersAre(t, store, "insp", 1)
	info := expectCounts(t, l, "k", 2, 3, 1)
	if info.Fence != l2.Fence || len(info.HolderList) != 2 || info.Holder == nil {
		t.Fatalf("fence %d (the newest holder's %d), holders %+v, oldest %+v", info.Fence, l2.Fence, info.HolderList, info.Holder)
	}
	first, second := info.HolderList[0], info.HolderList[1]
	if first.Fence != l1.Fence || first.Permits != 2 || second.Fence != l2.Fence || second.Permits != 1 {
		t.Fatalf("holder list %+v, want fences %d (2 permits), %d (1)", info.HolderList, l1.Fence, l2.Fence)
	}
	if *info.Holder != first {
		t.Fatalf("holder %+v is not the oldest in %+v", *info.Holder, info.HolderList)
	}
	for _, h := range info.HolderList {
		if h.ID <= 0 || h.Lease <= 0 || !strings.HasPrefix(h.Addr, "127.0.0.1:") {
			t.Fatalf("holder %+v", h)
		}
	}
	if first.ID == second.ID || first.Addr == second.Addr {
		t.Fatalf("two holds on one connection: %+v", info.HolderList)
	}

	h1.release(t)
	info = expectCounts(t, l, "k", 1, 1, 1)
	if len(info.HolderList) != 1 || info.HolderList[0] != second || *info.Holder != second {
		t.Fatalf("after the first let go: %+v, oldest %+v", info.HolderList, info.Holder)
	}
	h2.release(t)
	lw := writer.grant(t)
	info = expectCounts(t, l, "k", 1, 5, 0)
	if info.Fence != lw.Fence || info.HolderList[0].Permits != 5 || info.HeldFor == nil || info.LeaseLeft == nil {
		t.Fatalf("the writer (fence %d): %+v, held for %v, lease left %v", lw.Fence, info.HolderList, info.HeldFor, info.LeaseLeft)
	}
	writer.release(t)
	if info := expectCounts(t, l, "k", 0, 0, 0); info.Fence != lw.Fence || info.Holder != nil || len(info.HolderList) != 0 {
		t.Fatalf("free: %+v", info)
	}
}

// A server from before permits sends no holders: one holder, one permit.
func TestInspectOfAServerWithoutPermits(t *testing.T) {
	reply := "%6\r\n+held\r\n#t\r\n+fence\r\n:7\r\n+held_for_ms\r\n:5\r\n+lease_left_ms\r\n:900\r\n+waiters\r\n:2\r\n" +
		"+holder\r\n%4\r\n+id\r\n:3\r\n+name\r\n+\r\n+addr\r\n+127.0.0.1:5\r\n+lease\r\n:1\r\n"
	v, err := readValue(bufio.NewReader(strings.NewReader(reply)), DefaultMaxReplyBytes)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := keyInfoOf(v)
	want := KeyHolder{ID: 3, Addr: "127.0.0.1:5", Lease: 1, Fence: 7, Permits: 1}
	if !ok || !info.Held || info.Holders != 1 || info.PermitsHeld != 1 || info.Waiters != 2 ||
		*info.Holder != want || !reflect.DeepEqual(info.HolderList, []KeyHolder{want}) {
		t.Fatalf("%v %+v", ok, info)
	}
}

// PERMITS and TAKE go on the wire only when they are not 1 (TAKE ALL for
// Exclusive): a server without permits keeps working for plain locks.
func TestPermitOptionsOnTheWire(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	addr := fakeServer(t, func(args []string) string {
		if args[0] == "HOLD" || args[0] == "TRYHOLD" {
			mu.Lock()
			sent = append(sent, strings.Join(args[3:], " "))
			mu.Unlock()
			return grantReply
		}
		return grantingScript(grantReply, "+OK\r\n", "+OK\r\n")(args)
	})
	store := connect(t, addr)
	plain, five := openLock(t, store, "l"), openLock(t, store, "l", Permits(5))
	ctx := context.Background()
	cases := []struct {
		l     *Lock
		opts  []HoldOption
		tail  string
		taken int
	}{
		{plain, nil, "", 1},
		{plain, []HoldOption{Exclusive()}, "", 1},
		{five, nil, " PERMITS 5", 1},
		{five, []HoldOption{Take(1)}, " PERMITS 5", 1},
		{five, []HoldOption{Take(2)}, " PERMITS 5 TAKE 2", 2},
		{five, []HoldOption{Exclusive()}, " PERMITS 5 TAKE ALL", 5},
		{five, []HoldOption{Take(2), Exclusive()}, " PERMITS 5 TAKE ALL", 5},
		{five, []HoldOption{Exclusive(), Take(3)}, " PERMITS 5 TAKE 3", 3},
	}
	for i, c := range cases {
		var taken [2]int
		err := c.l.Hold(ctx, "k", func(_ context.Context, lease *Lease) error { taken[0] = lease.Permits(); return nil }, append(c.opts, Wait(time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.l.TryHold(ctx, "k", func(_ context.Context, lease *Lease) error { taken[1] = lease.Permits(); return nil }, c.opts...); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := sent[2*i:]
		mu.Unlock()
		want := []string{"WAIT 1000 TTL 10000" + c.tail, "TTL 10000" + c.tail}
		if !reflect.DeepEqual(got, want) || taken != [2]int{c.taken, c.taken} {
			t.Errorf("case %d: sent %q, want %q; leases of %v permits, want %d", i, got, want, taken, c.taken)
		}
	}
}

// holderCommand builds cmd/holder into a folder of the test's.
func holderCommand(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holder")
	goBuild(t, filepath.Join(repoRoot(t), "clients", "go"), "./cmd/holder", bin)
	return bin
}

// startHolderCommand starts cmd/holder (built at bin) with args.
func startHolderCommand(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startProc(t, "cmd/holder", exec.Command(bin, args...))
}

// A holder whose connection closes (its process killed) gives its permits
// back at once, to the head of the line; and cmd/holder keeps the Rust
// holder's protocol.
func TestAClosedConnectionReturnsItsPermitsToTheLine(t *testing.T) {
	bin := holderCommand(t)
	srv := startServer(t)
	store := connect(t, srv.addr)
	const ttl = 60 * time.Second // far longer than the test: the close, not the ttl, lets go
	l := openLock(t, store, "dead", Permits(3), TTL(ttl))
	proc := startHolderCommand(t, bin, srv.addr, "dead", "k", "60000", "--permits", "3", "--take", "2")
	f0 := fenceOf(t, proc.said(t, "the holder's grant"))
	waiter := startHold(t, l, "k", Take(2))
	waitersAre(t, store, "dead", 1)
	expectCounts(t, l, "k", 1, 2, 1)
	if err := proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	lease := waiter.grant(t)
	if lease.Fence <= f0 {
		t.Fatalf("fence %d after %d", lease.Fence, f0)
	}

	writer := startHolderCommand(t, bin, "--take=all", srv.addr, "dead", "k", "--permits=3")
	waitersAre(t, store, "dead", 1)
	waiter.release(t)
	if f := fenceOf(t, writer.said(t, "the writer's grant")); f <= lease.Fence {
		t.Fatalf("the writer's fence %d after %d", f, lease.Fence)
	}
	expectCounts(t, l, "k", 1, 3, 0)
	_, _ = io.WriteString(writer.in, "look\ngo\n")
	if look, end := writer.said(t, "look"), writer.said(t, "the release"); look != "look held" || end != "released" {
		t.Fatalf("the writer said %q, %q", look, end)
	}

	bad := startHolderCommand(t, bin, srv.addr, "dead", "k", "--permits", "3", "--take", "4")
	if line := bad.said(t, "the refusal"); line != `lost lock dead: key "k": 4 permits asked of a lock of 3: invalid` {
		t.Fatalf("the holder said %q", line)
	}
}
