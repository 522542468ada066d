package locks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Elections and notes against a real server (HOLDLINE_BIN): Campaign,
// Leadership, Proclaim, Leader, Observe (its present state first, and
// again after a CLIENT KILL of its connection), a second campaigner
// elected with a greater fence, the Note option; against scripted
// servers, Observe's reading of every event and of a closed key; and
// clients/testing/election.py run with cmd/campaigner.

// command sends one command on a connection of the store's pool and
// answers its reply, failing the test when the connection fails.
func command(t testing.TB, store *Store, args ...string) value {
	t.Helper()
	c, err := store.pool.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer store.pool.put(c)
	r := <-c.request(args...).reply
	if r.err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), r.err)
	}
	return r.v
}

// killClient kills the connection id (CLIENT KILL ID), failing the test
// unless the server killed one.
func killClient(t testing.TB, store *Store, id int64) {
	t.Helper()
	if v := command(t, store, "CLIENT", "KILL", "ID", fmt.Sprint(id)); v.num != 1 {
		t.Fatalf("CLIENT KILL ID %d: %+v", id, v)
	}
}

// campaign is a Campaign run in a goroutine that leads until resign.
type campaign struct {
	elected chan *Leadership
	lost    chan error // Cause of the function's ctx, once it ended
	resign  chan struct{}
	done    chan error
	cancel  context.CancelFunc
}

// startCampaign campaigns in e with note, in a goroutine.
func startCampaign(t testing.TB, e *Election, note string) *campaign {
	ctx, cancel := context.WithCancel(context.Background())
	c := &campaign{
		elected: make(chan *Leadership, 1), lost: make(chan error, 1),
		resign: make(chan struct{}), done: make(chan error, 1), cancel: cancel,
	}
	go func() {
		c.done <- e.Campaign(ctx, note, func(ctx context.Context, lead *Leadership) error {
			c.elected <- lead
			select {
			case <-ctx.Done():
				c.lost <- Cause(ctx)
			case <-c.resign:
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		c.stop()
	})
	return c
}

// stop has the campaign resign, once.
func (c *campaign) stop() {
	select {
	case <-c.resign:
	default:
		close(c.resign)
	}
}

// leadership waits for the campaign to be elected.
func (c *campaign) leadership(t testing.TB) *Leadership {
	t.Helper()
	select {
	case lead := <-c.elected:
		return lead
	case err := <-c.done:
		t.Fatalf("the campaign ended unelected: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the campaign was not elected within 20s")
	}
	return nil
}

// notElected fails the test if the campaign was elected, or ended.
func (c *campaign) notElected(t testing.TB) {
	t.Helper()
	select {
	case <-c.elected:
		t.Fatal("elected while another leads")
	case err := <-c.done:
		t.Fatalf("the campaign ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// observe observes e until the test ends: Observe's channel.
func observe(t testing.TB, e *Election) <-chan *Leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	leaders, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return leaders
}

// nextLeader reads the next item of an Observe, failing the test after
// 10s or when the channel closes.
func nextLeader(t testing.TB, leaders <-chan *Leader) *Leader {
	t.Helper()
	select {
	case l, ok := <-leaders:
		if !ok {
			t.Fatal("the Observe channel closed")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("Observe yielded nothing within 10s")
	}
	return nil
}

// observeEnds fails the test unless Observe's channel closes, yielding
// nothing more, within 5s.
func observeEnds(t testing.TB, leaders <-chan *Leader, what string) {
	t.Helper()
	select {
	case l, ok := <-leaders:
		if ok {
			t.Fatalf("%s: Observe yielded %+v, want its channel closed", what, l)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Observe's channel did not close", what)
	}
}

// expectLeader reads the next item and checks it: want nil for no leader.
func expectLeader(t testing.TB, leaders <-chan *Leader, what string, want *Leader) {
	t.Helper()
	got := nextLeader(t, leaders)
	switch {
	case want == nil && got != nil:
		t.Fatalf("%s: Observe yielded %+v, want no leader", what, *got)
	case want != nil && got == nil:
		t.Fatalf("%s: Observe yielded no leader, want %+v", what, *want)
	case want != nil && (got.Fence != want.Fence || got.Note != want.Note):
		t.Fatalf("%s: Observe yielded %+v, want %+v", what, *got, *want)
	}
}

// quiet fails the test if Observe yields anything within d.
func quiet(t testing.TB, leaders <-chan *Leader, d time.Duration) {
	t.Helper()
	select {
	case l := <-leaders:
		t.Fatalf("Observe yielded %+v, want nothing", l)
	case <-time.After(d):
	}
}

// supportsObserve skips the test (or fails it, HOLDLINE_REQUIRE_TOOLS=1)
// when the server answers OBSERVE as an unknown command.
func supportsObserve(t *testing.T, store *Store) {
	t.Helper()
	v := command(t, store, "OBSERVE", "probe", "probe")
	if v.isError() && strings.Contains(v.text, "unknown command") {
		skipOrFail(t, "the holdline server knows no OBSERVE: build a newer one (cargo build --release --bin holdline)")
	}
	command(t, store, "UNOBSERVE", "probe", "probe")
}

func TestElectionCampaignLeaderProclaim(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "elections", TTL(2*time.Second))
	e := l.Election("billing")
	if e.Name() != "billing" || e.Lock() != l {
		t.Fatalf("Name %q, Lock %v", e.Name(), e.Lock())
	}
	ctx := context.Background()
	if leader, err := e.Leader(ctx); err != nil || leader != nil {
		t.Fatalf("Leader before any campaign: %+v, %v", leader, err)
	}

	c := startCampaign(t, e, "10.0.0.5:8080")
	lead := c.leadership(t)
	if lead.Fence() == 0 || lead.Note() != "10.0.0.5:8080" || lead.Err() != nil {
		t.Fatalf("leadership: fence %d, note %q, err %v", lead.Fence(), lead.Note(), lead.Err())
	}
	time.Sleep(20 * time.Millisecond)
	leader, err := e.Leader(ctx)
	if err != nil || leader == nil {
		t.Fatalf("Leader while one leads: %+v, %v", leader, err)
	}
	if leader.Note != "10.0.0.5:8080" || leader.Fence != lead.Fence() || leader.HeldFor < 10*time.Millisecond || leader.HeldFor > 5*time.Second {
		t.Fatalf("Leader: %+v, want note 10.0.0.5:8080, fence %d, held for 10ms..5s", *leader, lead.Fence())
	}
	info, err := l.Inspect(ctx, "billing")
	if err != nil || info.Holder == nil || info.Holder.Note != "10.0.0.5:8080" {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}

	if err := lead.Proclaim(ctx, "10.0.0.6:9090"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if lead.Note() != "10.0.0.6:9090" {
		t.Fatalf("Note after Proclaim: %q", lead.Note())
	}
	if leader, err := e.Leader(ctx); err != nil || leader == nil || leader.Note != "10.0.0.6:9090" || leader.Fence != lead.Fence() {
		t.Fatalf("Leader after Proclaim: %+v, %v", leader, err)
	}
	// A note the server refuses leaves the note as it was.
	err = lead.Proclaim(ctx, "two\nlines")
	want := `lock elections: key "billing": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid`
	if !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Fatalf("Proclaim of a bad note: %v, want %s", err, want)
	}
	if leader, err := e.Leader(ctx); err != nil || leader == nil || leader.Note != "10.0.0.6:9090" {
		t.Fatalf("Leader after a refused Proclaim: %+v, %v", leader, err)
	}

	c.stop()
	if err := within(t, "Campaign's answer", 10*time.Second, c.done); err != nil {
		t.Fatalf("Campaign after resigning: %v", err)
	}
	if leader, err := e.Leader(ctx); err != nil || leader != nil {
		t.Fatalf("Leader after the resignation: %+v, %v", leader, err)
	}
	err = lead.Proclaim(ctx, "late")
	want = `lock elections: key "billing": proclaimed after the leadership ended: invalid`
	if !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Fatalf("Proclaim after resigning: %v, want %s", err, want)
	}
}

func TestElectionCampaignErrors(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "elections")
	ctx := context.Background()

	err := l.Election("billing").Campaign(ctx, "", func(context.Context, *Leadership) error {
		t.Error("elected with an empty note")
		return nil
	})
	want := `lock elections: key "billing": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid`
	if !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Fatalf("an empty note: %v, want %s", err, want)
	}
	err = l.Election("").Campaign(ctx, "n", func(context.Context, *Leadership) error { return nil })
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty name: %v", err)
	}
	if err := l.Election("billing").Campaign(ctx, "n", nil); !errors.Is(err, ErrInvalid) ||
		err.Error() != `lock elections: key "billing": the function is nil: invalid` {
		t.Fatalf("a nil function: %v", err)
	}
	// The function's own error comes back unchanged; the key is let go.
	mine := errors.New("mine")
	if err := l.Election("billing").Campaign(ctx, "n", func(context.Context, *Leadership) error { return mine }); err != mine {
		t.Fatalf("the function's error: %v", err)
	}
	if leader, err := l.Election("billing").Leader(ctx); err != nil || leader != nil {
		t.Fatalf("Leader after the function failed: %+v, %v", leader, err)
	}
}

func TestElectionSecondCampaignerGreaterFence(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	other := connect(t, srv.addr)
	e1 := openLock(t, store, "elections").Election("billing")
	e2 := openLock(t, other, "elections").Election("billing")
	ctx := context.Background()

	first := startCampaign(t, e1, "first")
	lead1 := first.leadership(t)
	second := startCampaign(t, e2, "second")
	waitersAre(t, store, "elections", 1)
	second.notElected(t)
	if leader, err := e2.Leader(ctx); err != nil || leader == nil || leader.Note != "first" || leader.Fence != lead1.Fence() {
		t.Fatalf("Leader while the first leads: %+v, %v", leader, err)
	}

	// A third campaign whose ctx ends while it waits leaves the line.
	third, cancel := context.WithCancel(ctx)
	thirdDone := make(chan error, 1)
	go func() {
		thirdDone <- e2.Campaign(third, "third", func(context.Context, *Leadership) error {
			t.Error("the cancelled campaign was elected")
			return nil
		})
	}()
	waitersAre(t, store, "elections", 2)
	cancel()
	if err := within(t, "the cancelled campaign", 10*time.Second, thirdDone); err != context.Canceled {
		t.Fatalf("a campaign whose ctx ended: %v", err)
	}
	waitersAre(t, store, "elections", 1)

	first.stop()
	if err := within(t, "the first campaign", 10*time.Second, first.done); err != nil {
		t.Fatal(err)
	}
	lead2 := second.leadership(t)
	if lead2.Fence() <= lead1.Fence() {
		t.Fatalf("the second leader's fence %d is not above the first's %d", lead2.Fence(), lead1.Fence())
	}
	if leader, err := e1.Leader(ctx); err != nil || leader == nil || leader.Note != "second" || leader.Fence != lead2.Fence() {
		t.Fatalf("Leader once the second leads: %+v, %v", leader, err)
	}
}

func TestElectionCampaignWaitsPastItsHoldsWait(t *testing.T) {
	defer func(was time.Duration) { campaignWait = was }(campaignWait)
	campaignWait = 200 * time.Millisecond
	store := startStore(t)
	e := openLock(t, store, "elections").Election("billing")

	first := startCampaign(t, e, "first")
	lead1 := first.leadership(t)
	second := startCampaign(t, e, "second")
	// Several of the second's HOLDs end in use meanwhile; it goes on.
	time.Sleep(700 * time.Millisecond)
	second.notElected(t)
	if n := stats(t, store, "elections")["timeouts"]; n < 2 {
		t.Fatalf("%d HOLDs of the second campaign ended in use, want 2 or more", n)
	}
	first.stop()
	if lead2 := second.leadership(t); lead2.Fence() <= lead1.Fence() {
		t.Fatalf("fences %d then %d", lead1.Fence(), lead2.Fence())
	}
}

func TestElectionLostLeadershipElectsTheNext(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	other := connect(t, srv.addr)
	l := openLock(t, store, "elections", TTL(2*time.Second))
	e1 := l.Election("billing")
	e2 := openLock(t, other, "elections", TTL(2*time.Second)).Election("billing")
	ctx := context.Background()

	first := startCampaign(t, e1, "first")
	lead1 := first.leadership(t)
	second := startCampaign(t, e2, "second")
	waitersAre(t, store, "elections", 1)

	info, err := l.Inspect(ctx, "billing")
	if err != nil || info.Holder == nil {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	killClient(t, other, info.Holder.ID)
	cause := within(t, "the lost leadership's ctx", 10*time.Second, first.lost)
	if !errors.Is(cause, ErrLost) {
		t.Fatalf("Cause of the lost leadership's ctx: %v", cause)
	}
	if !errors.Is(lead1.Err(), ErrLost) {
		t.Fatalf("Err of the lost leadership: %v", lead1.Err())
	}
	if err := lead1.Proclaim(ctx, "still me"); !errors.Is(err, ErrLost) {
		t.Fatalf("Proclaim of a lost leadership: %v", err)
	}
	if err := within(t, "the first campaign", 10*time.Second, first.done); !errors.Is(err, ErrLost) {
		t.Fatalf("Campaign whose leadership was lost: %v", err)
	}
	lead2 := second.leadership(t)
	if lead2.Fence() <= lead1.Fence() {
		t.Fatalf("the next leader's fence %d is not above %d", lead2.Fence(), lead1.Fence())
	}
}

func TestNoteOption(t *testing.T) {
	store := startStore(t)
	l := openLock(t, store, "jobs")
	ctx := context.Background()
	err := l.Hold(ctx, "7", func(ctx context.Context, lease *Lease) error {
		info, err := l.Inspect(ctx, "7")
		if err != nil || info.Holder == nil || info.Holder.Note != "job 7 on host-a" {
			t.Errorf("Inspect of a hold with a note: %+v, %v", info, err)
		}
		return nil
	}, Note("job 7 on host-a"))
	if err != nil {
		t.Fatal(err)
	}
	acquired, err := l.TryHold(ctx, "8", func(ctx context.Context, lease *Lease) error {
		info, err := l.Inspect(ctx, "8")
		if err != nil || info.Holder == nil || info.Holder.Note != "ünïcode ✓" {
			t.Errorf("Inspect of a TryHold with a note: %+v, %v", info, err)
		}
		return nil
	}, Note("first"), Note("ünïcode ✓"))
	if !acquired || err != nil {
		t.Fatalf("TryHold with a note: %v, %v", acquired, err)
	}
	err = l.Hold(ctx, "9", func(ctx context.Context, lease *Lease) error {
		if info, err := l.Inspect(ctx, "9"); err != nil || info.Holder == nil || info.Holder.Note != "" {
			t.Errorf("Inspect of a hold without a note: %+v, %v", info, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `lock jobs: key "7": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid`
	for _, bad := range []string{"", "tab\there", strings.Repeat("n", 1025)} {
		err := l.Hold(ctx, "7", nothing, Note(bad))
		if !errors.Is(err, ErrInvalid) || err.Error() != want {
			t.Errorf("a note of %d bytes: %v, want %s", len(bad), err, want)
		}
	}
	if err := l.Hold(ctx, "7", nothing, Note(strings.Repeat("n", 1024))); err != nil {
		t.Errorf("a note of 1024 bytes: %v", err)
	}
}

func TestNoteOptionOnTheWire(t *testing.T) {
	got := make(chan []string, 4)
	addr := fakeServer(t, resp3(func(cmd string, args []string) string {
		switch cmd {
		case "HOLD", "TRYHOLD":
			got <- args
			return grantReply
		}
		return "+OK\r\n"
	}))
	store := connect(t, addr)
	l := openLock(t, store, "jobs", Permits(3))
	ctx := context.Background()
	if err := l.Hold(ctx, "7", nothing, Note("a b"), Take(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryHold(ctx, "7", nothing, Note("c")); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold(ctx, "7", nothing); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"HOLD jobs 7 WAIT 10000 TTL 10000 PERMITS 3 TAKE 2 NOTE a b",
		"TRYHOLD jobs 7 TTL 10000 PERMITS 3 NOTE c",
		"HOLD jobs 7 WAIT 10000 TTL 10000 PERMITS 3",
	} {
		if args := strings.Join(<-got, " "); args != want {
			t.Errorf("sent %q, want %q", args, want)
		}
	}
}

func TestElectionObserve(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	supportsObserve(t, store)
	other := connect(t, srv.addr)
	e := openLock(t, store, "elections", TTL(2*time.Second)).Election("billing")
	e2 := openLock(t, other, "elections", TTL(2*time.Second)).Election("billing")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	observed := make(chan *conn, 4)
	hook := func(c *conn) { observed <- c }
	observing.Store(&hook)
	defer observing.Store(nil)

	leaders, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watching := within(t, "the observing connection", 10*time.Second, observed)
	expectLeader(t, leaders, "the present state, nobody leading", nil)

	first := startCampaign(t, e2, "first")
	lead1 := first.leadership(t)
	expectLeader(t, leaders, "the first elected", &Leader{Note: "first", Fence: lead1.Fence()})
	if err := lead1.Proclaim(ctx, "first, moved"); err != nil {
		t.Fatal(err)
	}
	expectLeader(t, leaders, "the first proclaims", &Leader{Note: "first, moved", Fence: lead1.Fence()})

	// A second observer started now sees the present leader first.
	ctx2, cancel2 := context.WithCancel(ctx)
	late, err := e2.Observe(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "the second observing connection", 10*time.Second, observed)
	expectLeader(t, late, "the present state, the first leading", &Leader{Note: "first, moved", Fence: lead1.Fence()})
	cancel2()
	observeEnds(t, late, "the cancelled Observe")

	second := startCampaign(t, e, "second")
	waitersAre(t, store, "elections", 1)
	quiet(t, leaders, 100*time.Millisecond) // a waiter is no change of leader
	first.stop()
	expectLeader(t, leaders, "the first resigns", nil)
	lead2 := second.leadership(t)
	if lead2.Fence() <= lead1.Fence() {
		t.Fatalf("fences %d then %d", lead1.Fence(), lead2.Fence())
	}
	expectLeader(t, leaders, "the second elected", &Leader{Note: "second", Fence: lead2.Fence()})

	// The observing connection killed: Observe observes again, on a new
	// connection, and yields the present state again.
	if v := command(t, store, "CLIENT", "KILL", "ADDR", watching.nc.LocalAddr().String()); v.isError() {
		t.Fatalf("CLIENT KILL ADDR: %s", v.text)
	}
	again := within(t, "the observing connection after the kill", 10*time.Second, observed)
	if again == watching {
		t.Fatal("observing again on the killed connection")
	}
	expectLeader(t, leaders, "the present state again after the kill", &Leader{Note: "second", Fence: lead2.Fence()})
	second.stop()
	expectLeader(t, leaders, "the second resigns", nil)

	cancel()
	for l := range leaders {
		if l != nil {
			t.Fatalf("after ctx ended, Observe yielded %+v", *l)
		}
	}
}

// The campaigner program against clients/testing/election.py.
func TestCampaignerElectionChecker(t *testing.T) {
	root := repoRoot(t)
	checker := filepath.Join(root, "clients", "testing", "election.py")
	if _, err := os.Stat(checker); err != nil {
		skipOrFail(t, "clients/testing/election.py is not there yet: the election checker cannot run")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		skipOrFail(t, "python3 is not installed: the election checker needs it")
	}
	supportsObserve(t, startStore(t))
	bin := filepath.Join(t.TempDir(), "campaigner")
	goBuild(t, filepath.Join(root, "clients", "go"), "./cmd/campaigner", bin)
	// As the README says it: from clients/go/locks.
	cmd := exec.Command(python, filepath.Join("..", "..", "testing", "election.py"), "--campaigner", bin)
	if os.Getenv("HOLDLINE_BIN") == "" {
		cmd.Env = append(os.Environ(), "HOLDLINE_BIN="+filepath.Join(root, "target", "release", "holdline"))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("election.py --campaigner %s: %v\n%s", bin, err, out)
	}
	t.Logf("election.py:\n%s", out)
}

// observePush is the server's push of an observed key's event.
func observePush(lock, key, event string, fence, holder int64, note string) string {
	return ">8\r\n" + bulkReply("observe") + bulkReply(lock) + bulkReply(key) + bulkReply(event) +
		fmt.Sprintf(":%d\r\n:1\r\n:%d\r\n", fence, holder) + bulkReply(note)
}

func TestObserveReadsEveryEvent(t *testing.T) {
	var observes atomic.Int32
	addr := fakeServer(t, resp3(func(cmd string, args []string) string {
		switch cmd {
		case "OBSERVE":
			if args[1] != "elections" || args[2] != "billing" {
				return "-ERR wrong key\r\n"
			}
			if observes.Add(1) == 1 {
				return "+OK\r\n" +
					observePush("elections", "billing", "held", 5, 11, "a") +
					observePush("elections", "other", "granted", 9, 12, "another key") +
					observePush("elections", "billing", "held", 5, 11, "b") +
					observePush("elections", "billing", "released", 4, 10, "an older lease") +
					observePush("elections", "billing", "released", 5, 11, "b") +
					observePush("elections", "billing", "granted", 6, 13, "c") +
					observePush("elections", "billing", "expired", 6, 13, "c") +
					observePush("elections", "billing", "granted", 7, 14, "d") +
					observePush("elections", "billing", "revoked", 7, 14, "d") +
					observePush("elections", "billing", "granted", 8, 15, "e") +
					observePush("elections", "billing", "disconnected", 8, 15, "e") +
					observePush("elections", "billing", "granted", 9, 16, "f") +
					observePush("elections", "billing", "closed", 9, 16, "f")
			}
			return "+OK\r\n" + observePush("elections", "billing", "free", 9, 0, "")
		case "PING":
			return "+PONG\r\n"
		}
		return "-ERR unknown command\r\n"
	}))
	store := connect(t, addr)
	e := openLock(t, store, "elections").Election("billing")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*Leader{
		{Note: "a", Fence: 5}, {Note: "b", Fence: 5}, nil,
		{Note: "c", Fence: 6}, nil, {Note: "d", Fence: 7}, nil,
		{Note: "e", Fence: 8}, nil, {Note: "f", Fence: 9},
		nil, // observed again after closed: the present state
	} {
		expectLeader(t, leaders, fmt.Sprintf("item %d", i), want)
	}
	quiet(t, leaders, 200*time.Millisecond)
	if n := observes.Load(); n != 2 {
		t.Fatalf("OBSERVE sent %d times, want 2", n)
	}
	cancel()
	observeEnds(t, leaders, "after ctx ended")
}

func TestObserveRefused(t *testing.T) {
	for _, line := range []string{
		"ERR OBSERVE needs RESP3: send HELLO 3 first",
		"ERR unknown command 'OBSERVE'",
		"LIMIT this connection observes 1000 keys already",
	} {
		addr := fakeServer(t, resp3(func(cmd string, args []string) string {
			switch cmd {
			case "OBSERVE":
				return "-" + line + "\r\n"
			}
			return "+OK\r\n"
		}))
		store := connect(t, addr)
		leaders, err := openLock(t, store, "elections").Election("billing").Observe(context.Background())
		want := line
		kind := KindInvalid
		if strings.HasPrefix(line, "LIMIT ") {
			want, kind = strings.TrimPrefix(line, "LIMIT "), KindLimit
		}
		var e *Error
		if leaders != nil || !errors.As(err, &e) || e.Kind != kind || err.Error() != want {
			t.Errorf("OBSERVE answered -%s: %v, %v, want %v %q", line, leaders, err, kind, want)
		}
	}
	store := connect(t, fakeServer(t, helloOnly))
	if _, err := openLock(t, store, "elections").Election("").Observe(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty election name: %v", err)
	}
	_ = store.Close()
	_, err := openLock(t, connect(t, fakeServer(t, helloOnly)), "elections").Election("billing").Observe(canceled())
	if err != context.Canceled {
		t.Errorf("an ended ctx: %v", err)
	}
}

// canceled answers a context that has ended.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestObserveSilentServerObservedAgain(t *testing.T) {
	var observes atomic.Int32
	addr := fakeServer(t, resp3(func(cmd string, args []string) string {
		switch cmd {
		case "OBSERVE":
			observes.Add(1)
			return "+OK\r\n" + observePush("elections", "billing", "held", 3, 7, "n")
		case "PING":
			return "" // silent
		}
		return "+OK\r\n"
	}))
	store := connect(t, addr)
	e := openLock(t, store, "elections", TTL(300*time.Millisecond)).Election("billing")
	leaders := observe(t, e)
	start := time.Now()
	expectLeader(t, leaders, "the present state", &Leader{Note: "n", Fence: 3})
	expectLeader(t, leaders, "the present state, observed again", &Leader{Note: "n", Fence: 3})
	// PINGs every 100ms; silent for 1s (a ttl, at least 1s): given up.
	if took := time.Since(start); took < time.Second || took > 3*time.Second {
		t.Fatalf("observed again after %v, want 1s to 3s", took)
	}
	if n := observes.Load(); n != 2 {
		t.Fatalf("OBSERVE sent %d times, want 2", n)
	}
}

func TestObserveStoreClosedClosesTheChannel(t *testing.T) {
	addr := fakeServer(t, resp3(func(cmd string, args []string) string {
		switch cmd {
		case "OBSERVE":
			return "+OK\r\n" + observePush("elections", "billing", "free", 0, 0, "")
		}
		return "+PONG\r\n"
	}))
	store := connect(t, addr)
	leaders, err := openLock(t, store, "elections").Election("billing").Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	expectLeader(t, leaders, "the present state", nil)
	_ = store.Close()
	observeEnds(t, leaders, "after the store closed")
}

// resp3 is a fake server's script that answers HELLO (RESP3, as OBSERVE
// needs) and gives every other command, upper-cased, to script.
func resp3(script func(cmd string, args []string) string) func(args []string) string {
	return func(args []string) string {
		cmd := strings.ToUpper(args[0])
		if cmd == "HELLO" {
			return helloReply
		}
		return script(cmd, args)
	}
}

// helloOnly answers HELLO, and nothing else.
var helloOnly = resp3(func(string, []string) string { return "" })

// In a cluster Observe asks the node that serves the election's key,
// follows MOVED, and after a closed partition observes again where the
// key went.
func TestObserveFollowsMovedAndAClosedPartition(t *testing.T) {
	var onZero, onOne atomic.Int32
	fc := newFakeCluster(t, 2, func(fc *fakeCluster, node int, args []string) string {
		if args[0] != "OBSERVE" {
			return ""
		}
		moved := fmt.Sprintf("-MOVED %d %s\r\n", slotOf(args[2]), fc.addr(1-node))
		switch {
		case node == 0 && onZero.Add(1) == 1:
			return moved
		case node == 0:
			return "+OK\r\n" + observePush("elections", "billing", "held", 5, 21, "b")
		case onOne.Add(1) == 1:
			return "+OK\r\n" + observePush("elections", "billing", "held", 4, 20, "a") +
				observePush("elections", "billing", "closed", 4, 20, "a")
		}
		return moved
	})
	fc.setRanges(slotRange{0, slotCount - 1, 0})
	store := connect(t, fc.addr(0))
	leaders := observe(t, openLock(t, store, "elections").Election("billing"))
	expectLeader(t, leaders, "the present state on the node MOVED named", &Leader{Note: "a", Fence: 4})
	expectLeader(t, leaders, "the present state where the key went", &Leader{Note: "b", Fence: 5})
	// Node 1 is asked again or not, as the map's refresh (in the
	// background, after the MOVED) was quicker than the closed or not.
	if a, b := onZero.Load(), onOne.Load(); a != 2 || b < 1 || b > 2 {
		t.Fatalf("OBSERVE sent %d times to node 0 and %d to node 1, want 2 and 1 or 2", a, b)
	}
}

// A leader revoked at its maxHold: its ctx ends, Campaign answers the
// server's text, and observers see no leader, then the next one.
func TestElectionObserveRevokedLeader(t *testing.T) {
	store := startStore(t)
	supportsObserve(t, store)
	e := openLock(t, store, "elections", MaxHold(300*time.Millisecond)).Election("billing")
	leaders := observe(t, e)
	expectLeader(t, leaders, "the present state", nil)
	c := startCampaign(t, e, "short")
	lead := c.leadership(t)
	expectLeader(t, leaders, "elected", &Leader{Note: "short", Fence: lead.Fence()})
	cause := within(t, "the revoked leadership's ctx", 5*time.Second, c.lost)
	want := `lock elections: key "billing": the lease was lost: it was revoked at its maxHold`
	if !errors.Is(cause, ErrLost) || cause.Error() != want {
		t.Fatalf("Cause: %v, want %s", cause, want)
	}
	if err := within(t, "Campaign's answer", 5*time.Second, c.done); !errors.Is(err, ErrLost) || err.Error() != want {
		t.Fatalf("Campaign: %v, want %s", err, want)
	}
	expectLeader(t, leaders, "revoked", nil)
	next := startCampaign(t, e, "next")
	lead2 := next.leadership(t)
	expectLeader(t, leaders, "the next elected", &Leader{Note: "next", Fence: lead2.Fence()})
	if lead2.Fence() <= lead.Fence() {
		t.Fatalf("fences %d then %d", lead.Fence(), lead2.Fence())
	}
}

// A real cluster (clients/testing/cluster.py): kill -9 of the node that
// serves the election's key ends its leader's ctx, the observer observes
// again at the new owner, and the next campaign there is elected with a
// greater fence, which the observer yields.
func TestElectionObserveAcrossAFailover(t *testing.T) {
	f := startCluster(t)
	store := connect(t, f.addrs())
	const victim = 1
	name := keyPerNode(t, f, store, "leader-")[victim]
	e := openLock(t, store, "elections", TTL(clusterMaxTTL)).Election(name)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders := observe(t, e)
	expectLeader(t, leaders, "the present state", nil)
	first := startCampaign(t, e, "first")
	lead1 := first.leadership(t)
	expectLeader(t, leaders, "the first elected", &Leader{Note: "first", Fence: lead1.Fence()})

	if err := syscall.Kill(f.Nodes[victim].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if cause := within(t, "the leader's ctx", clusterEtcdTTL+3*time.Second, first.lost); !errors.Is(cause, ErrLost) {
		t.Fatalf("Cause: %v", cause)
	}
	// Campaign again until elected: the key's node is gone until the new
	// owner takes the partition over (ErrClosed meanwhile).
	deadline := killed.Add(clusterEtcdTTL + clusterMaxTTL + 10*time.Second)
	elected := make(chan uint64, 1)
	go func() {
		for ctx.Err() == nil && time.Now().Before(deadline) {
			err := e.Campaign(ctx, "second", func(ctx context.Context, lead *Leadership) error {
				elected <- lead.Fence()
				<-ctx.Done()
				return nil
			})
			if ctx.Err() != nil {
				return // the test is over
			}
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("a campaign after the kill: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	fence2 := within(t, "the second leader", time.Until(deadline), elected)
	if fence2 <= lead1.Fence() {
		t.Fatalf("fences %d then %d", lead1.Fence(), fence2)
	}
	t.Logf("elected again %v after the kill, fence %d then %d", time.Since(killed), lead1.Fence(), fence2)
	// The observer's items since the kill: none, until the second leader.
	for {
		l := nextLeader(t, leaders)
		if l == nil {
			continue
		}
		if l.Fence != fence2 || l.Note != "second" {
			t.Fatalf("after the kill Observe yielded %+v, want no leader or the second (fence %d)", *l, fence2)
		}
		break
	}
}
