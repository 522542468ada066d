package locks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A real cluster: clients/testing/cluster.py starts a private etcd and
// three holdline nodes (8 partitions, an etcd ttl of 2s) on free loopback
// ports. The tests that kill no node share one (the default max ttl,
// 10s); a test that kills one has its own, with a max ttl of 2s, so the
// new owner's take-over wait is short (its locks ask a ttl of at most
// that: a longer one is refused invalid).

const (
	clusterEtcdTTL = 2 * time.Second
	// clusterMaxTTL: the max ttl of a test's own cluster (startCluster).
	clusterMaxTTL = 2 * time.Second
)

// clusterFixture is a running clients/testing/cluster.py.
type clusterFixture struct {
	Etcd  string `json:"etcd"`
	Nodes []struct {
		Addr string `json:"addr"`
		Pid  int    `json:"pid"`
	} `json:"nodes"`

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
}

// launchCluster starts the fixture, every node with --max-ttl maxTTL and
// env added to its environment (HOLDLINE_DRAIN_TIMEOUT=1ms...), and waits
// for its line.
func launchCluster(root string, maxTTL time.Duration, env ...string) (*clusterFixture, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil, errSkip("python3 is not installed: the cluster tests need it")
	}
	if _, err := os.Stat("/usr/bin/etcd"); err != nil {
		return nil, errSkip("/usr/bin/etcd is not installed (Debian's etcd-server): the cluster tests need it")
	}
	script := filepath.Join(root, "clients", "testing", "cluster.py")
	if _, err := os.Stat(script); err != nil {
		return nil, errSkip("no " + script)
	}
	f := &clusterFixture{cmd: exec.Command(python, script, "--nodes", "3", "--partitions", "8", "--etcd-ttl", "2",
		"--max-ttl", strconv.FormatInt(maxTTL.Milliseconds(), 10)+"ms")}
	f.cmd.Stderr = &f.stderr
	if len(env) > 0 {
		f.cmd.Env = append(os.Environ(), env...)
	}
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := f.cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		text, _ := bufio.NewReader(out).ReadString('\n')
		line <- text
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case text := <-line:
		if err := json.Unmarshal([]byte(text), f); err != nil || len(f.Nodes) != 3 {
			f.stop()
			return nil, fmt.Errorf("cluster.py said %q (%v); its stderr:\n%s", text, err, f.stderr.String())
		}
		return f, nil
	case <-time.After(60 * time.Second):
		f.stop()
		return nil, fmt.Errorf("cluster.py said nothing in 60s; its stderr:\n%s", f.stderr.String())
	}
}

// errSkip: a tool the cluster tests need is missing.
type errSkip string

func (e errSkip) Error() string { return string(e) }

// stop closes the fixture's stdin, which stops it and everything it
// started.
func (f *clusterFixture) stop() {
	_ = f.stdin.Close()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// startCluster starts a fixture of the test's own (its max ttl
// clusterMaxTTL, env added to its nodes' environment), stopped when it
// ends.
func startCluster(t *testing.T, env ...string) *clusterFixture {
	t.Helper()
	f, err := launchCluster(repoRoot(t), clusterMaxTTL, env...)
	f = clusterOrSkip(t, f, err)
	t.Cleanup(f.stop)
	return f
}

func clusterOrSkip(t *testing.T, f *clusterFixture, err error) *clusterFixture {
	t.Helper()
	var skip errSkip
	if errors.As(err, &skip) {
		skipOrFail(t, string(skip))
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster.py's stderr:\n%s", f.stderr.String())
		}
	})
	return f
}

// The fixture the tests that kill no node share; TestMain stops it.
var shared struct {
	once sync.Once
	f    *clusterFixture
	err  error
}

func sharedCluster(t *testing.T) *clusterFixture {
	t.Helper()
	shared.once.Do(func() { shared.f, shared.err = launchCluster(repoRoot(t), 10*time.Second) })
	return clusterOrSkip(t, shared.f, shared.err)
}

func stopSharedCluster() {
	if shared.f != nil {
		shared.f.stop()
	}
}

func (f *clusterFixture) addrs() string {
	addrs := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// rawCommand sends one command to addr on a plain connection of its own,
// the way a single-node client would, and answers the reply.
func rawCommand(t *testing.T, addr string, args ...string) value {
	t.Helper()
	host, port, ok := splitHostPort(addr)
	if !ok {
		t.Fatalf("bad address %s", addr)
	}
	c, err := dial(context.Background(), address{host: host, port: port}, nil, nil, 5*time.Second, DefaultMaxReplyBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close(errShutAbandoned)
	select {
	case r := <-c.request(args...).reply:
		if r.err != nil {
			t.Fatalf("%s %v: %v", addr, args, r.err)
		}
		return r.v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s %v: no answer in 5s", addr, args)
		return value{}
	}
}

// ownerOf is the node the store's map has for key.
func ownerOf(s *Store, key string) string {
	s.router.mu.Lock()
	defer s.router.mu.Unlock()
	return s.router.slots[slotOf(key)]
}

// keyPerNode answers one key for each node, as the store's map has them;
// the server's CLUSTER KEYSLOT agrees with the client's slot of each.
func keyPerNode(t *testing.T, f *clusterFixture, s *Store, prefix string) []string {
	t.Helper()
	keys := make([]string, len(f.Nodes))
	for i, found := 0, 0; found < len(keys); i++ {
		if i > 10000 {
			t.Fatal("no key found for every node")
		}
		k := prefix + strconv.Itoa(i)
		for n, node := range f.Nodes {
			if keys[n] == "" && ownerOf(s, k) == node.Addr {
				keys[n], found = k, found+1
			}
		}
	}
	for _, k := range keys {
		if v := rawCommand(t, f.Nodes[0].Addr, "CLUSTER", "KEYSLOT", k); v.kind != ':' || v.num != int64(slotOf(k)) {
			t.Fatalf("CLUSTER KEYSLOT %s: %+v, the client says %d", k, v, slotOf(k))
		}
	}
	return keys
}

// holdOnOwner holds key through l and checks, on plain connections, that
// the key's owner has it held with the lease's fence and that the other
// nodes send the command there.
func holdOnOwner(t *testing.T, f *clusterFixture, l *Lock, key, owner string) uint64 {
	t.Helper()
	var fence uint64
	err := l.Hold(context.Background(), key, func(ctx context.Context, lease *Lease) error {
		fence = lease.Fence
		info, ok := keyInfoOf(rawCommand(t, owner, "INSPECT", l.name, key))
		if !ok || !info.Held || info.Fence != lease.Fence {
			return fmt.Errorf("INSPECT on %s: %+v", owner, info)
		}
		for _, n := range f.Nodes {
			want := fmt.Sprintf("MOVED %d %s", slotOf(key), owner)
			if v := rawCommand(t, n.Addr, "INSPECT", l.name, key); n.Addr != owner && v.text != want {
				return fmt.Errorf("INSPECT on %s: %+v, want %s", n.Addr, v, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fence
}

// Connected through one address, the store learns the whole map, holds
// each key on its owner, and follows MOVED when its map is wrong.
func TestAClusterThroughOneAddress(t *testing.T) {
	f := sharedCluster(t)
	store := connect(t, f.Nodes[0].Addr)
	if store.router == nil {
		t.Fatal("single-node mode against a cluster")
	}
	store.router.mu.Lock()
	for slot, node := range store.router.slots {
		if node == "" {
			t.Errorf("the map has no node for slot %d", slot)
			break
		}
	}
	store.router.mu.Unlock()
	l := openLock(t, store, "one")
	keys := keyPerNode(t, f, store, "one-")
	for i, k := range keys {
		holdOnOwner(t, f, l, k, f.Nodes[i].Addr)
	}
	if n := store.redirects(); n != 0 {
		t.Fatalf("%d MOVED followed with a full map", n)
	}
	// A map that says node 0 serves every slot: the other two keys are
	// sent there first, and MOVED to their owners.
	for i, k := range keys[1:] {
		waitUntil(t, "the map refreshed", 5*time.Second, func() bool {
			store.router.mu.Lock()
			defer store.router.mu.Unlock()
			return store.router.refreshing == nil && store.router.slots[slotOf(k)] == f.Nodes[i+1].Addr
		})
		store.router.mu.Lock()
		for s := range store.router.slots {
			store.router.slots[s] = f.Nodes[0].Addr
		}
		store.router.mu.Unlock()
		holdOnOwner(t, f, l, k, f.Nodes[i+1].Addr)
	}
	if n := store.redirects(); n != 2 {
		t.Fatalf("%d MOVED followed, want 2", n)
	}
}

// Connected through every address, each node's key is held there, the
// fences INSPECT answers are the holds', and no MOVED is needed.
func TestAClusterThroughEveryAddress(t *testing.T) {
	f := sharedCluster(t)
	store := connect(t, f.addrs())
	l := openLock(t, store, "every")
	keys := keyPerNode(t, f, store, "every-")
	for i, k := range keys {
		fence := holdOnOwner(t, f, l, k, f.Nodes[i].Addr)
		info, err := l.Inspect(context.Background(), k)
		if err != nil || info == nil || info.Held || info.Fence != fence {
			t.Fatalf("%s: %+v %v (fence %d)", k, info, err, fence)
		}
	}
	if n := store.redirects(); n != 0 {
		t.Fatalf("%d MOVED followed", n)
	}
	store.router.mu.Lock()
	defer store.router.mu.Unlock()
	for _, n := range f.Nodes {
		if store.router.pools[n.Addr] == nil {
			t.Errorf("no pool for %s", n.Addr)
		}
	}
}

// A hold or a try asking a ttl above the cluster's max ttl is refused
// invalid, with the node's text; the max itself is granted.
func TestAClusterRefusesATTLAboveItsMax(t *testing.T) {
	f := sharedCluster(t)
	store := connect(t, f.Nodes[0].Addr)
	k := keyPerNode(t, f, store, "long-")[1]
	l := openLock(t, store, "long", TTL(20*time.Second))
	want := fmt.Sprintf(`lock long: key %q: ttl 20s is above the cluster's max ttl (10s): invalid`, k)
	err := l.Hold(context.Background(), k, nothing)
	if !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Fatalf("Hold: %v, want %s", err, want)
	}
	if _, err := l.TryHold(context.Background(), k, nothing); !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Fatalf("TryHold: %v, want %s", err, want)
	}
	if err := openLock(t, store, "long", TTL(10*time.Second)).Hold(context.Background(), k, nothing); err != nil {
		t.Fatalf("a ttl of the max: %v", err)
	}
}

// kill -9 of a key's owner: the lease held there is lost, the HOLD
// waiting there fails closed, and a new hold, retried while it fails
// closed or in use (the new owner, having taken the partition over
// without a hand-over, grants nothing for the max ttl), is granted by the
// new owner within the etcd ttl + the max ttl + 4s with a greater fence.
func TestAFailoverLosesTheLeaseAndTheKeyMovesOn(t *testing.T) {
	f := startCluster(t)
	holder, waiter := connect(t, f.addrs()), connect(t, f.addrs())
	const victim = 1
	k := keyPerNode(t, f, holder, "fo-")[victim]
	l := openLock(t, holder, "fo", TTL(clusterMaxTTL))
	held := holdUntilLost(t, l, k)
	fence := held.lease.Fence
	waiting := holdAsync(context.Background(), openLock(t, waiter, "fo", TTL(clusterMaxTTL)), k, nothing, Wait(60*time.Second))
	waitUntil(t, "the waiter in line", 10*time.Second, func() bool {
		info, err := l.Inspect(context.Background(), k)
		return err == nil && info != nil && info.Waiters == 1
	})
	if err := syscall.Kill(f.Nodes[victim].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	within(t, "the lease's loss", clusterEtcdTTL+3*time.Second, held.lost)
	if err := within(t, "the held hold", 5*time.Second, held.done); !errors.Is(err, ErrLost) {
		t.Fatalf("the held hold answered %v", err)
	}
	if err := within(t, "the waiting hold", clusterEtcdTTL+3*time.Second, waiting); !errors.Is(err, ErrClosed) {
		t.Fatalf("the waiting hold answered %v", err)
	}
	next := retryUntilGranted(t, l, k, killed.Add(clusterEtcdTTL+clusterMaxTTL+4*time.Second))
	t.Logf("granted again %v after the kill, fence %d then %d", time.Since(killed), fence, next)
	if next <= fence {
		t.Fatalf("fence %d after %d", next, fence)
	}
}

// retryUntilGranted holds key until it is granted, retrying while the
// hold fails closed (the old owner gone, no owner yet) or in use (the new
// owner's take-over wait outlasting the hold's), up to deadline.
func retryUntilGranted(t *testing.T, l *Lock, key string, deadline time.Time) uint64 {
	t.Helper()
	seen := map[string]int{}
	defer func() { t.Logf("the holds that failed first: %v", seen) }()
	for {
		var fence uint64
		err := l.Hold(context.Background(), key, func(ctx context.Context, lease *Lease) error {
			fence = lease.Fence
			return nil
		}, Wait(500*time.Millisecond))
		if err == nil {
			return fence
		}
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInUse) {
			t.Fatalf("a hold after the kill answered %v", err)
		}
		seen[err.Error()]++
		if time.Now().After(deadline) {
			t.Fatalf("not granted by the deadline; the last hold answered %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A single server (no --etcd) answers CLUSTER SLOTS with an error: the
// store runs as it always has, without a word.
func TestASingleServerIsNoCluster(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	if store.router != nil {
		t.Fatal("cluster mode against a single server")
	}
	if err := openLock(t, store, "single").Hold(context.Background(), "k", nothing); err != nil {
		t.Fatal(err)
	}
	if v := rawCommand(t, srv.addr, "CLUSTER", "SLOTS"); !v.isError() {
		t.Fatalf("CLUSTER SLOTS: %+v", v)
	}
}
