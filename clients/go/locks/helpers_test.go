package locks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as a holder process for the tests that kill or stop
// one: the test binary runs itself with LOCKS_TEST_HOLDER set.
func TestMain(m *testing.M) {
	if spec := os.Getenv("LOCKS_TEST_HOLDER"); spec != "" {
		os.Exit(holderProcess(spec))
	}
	code := m.Run()
	stopSharedCluster()
	os.Exit(code)
}

// repoRoot is the repository's root (the tests run in clients/go/locks).
func repoRoot(t testing.TB) string {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// skipOrFail skips the test, saying why; with HOLDLINE_REQUIRE_TOOLS=1
// (CI) a missing tool fails the test instead.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("HOLDLINE_REQUIRE_TOOLS") == "1" {
		t.Fatalf("%s (HOLDLINE_REQUIRE_TOOLS=1)", why)
	}
	t.Skip(why)
}

// server is a holdline serve started for one test.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startServer starts $HOLDLINE_BIN (else target/release/holdline) on a
// loopback port it binds itself (it prints which first) and stops it when
// the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin := os.Getenv("HOLDLINE_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), "target", "release", "holdline")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no holdline binary at %s: build it (cargo build --release -p holdline-server --bin holdline at the repository root) or set HOLDLINE_BIN", bin)
	}
	// SIGTERM drains for --drain-timeout: short, so stopping stays quick.
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--drain-timeout", "100ms"}, extra...)...)
	cmd.Stderr = io.Discard
	line := startLine(t, cmd, "holdline serve")
	addr, ok := cutPrefix(line, "holdline: listening on ")
	if !ok {
		t.Fatalf("holdline serve said %q first", line)
	}
	return &server{addr: addr, cmd: cmd}
}

// refusedAddr answers 127.0.0.1:PORT where a socket is bound but not
// listening until the test ends: dialling it is refused, and no other
// process can take the port meanwhile, as it could one found free and let
// go. (The net package binds a TCP socket only to listen or to dial.)
func refusedAddr(t testing.TB) string {
	t.Helper()
	syscall.ForkLock.RLock() // close-on-exec before a child could inherit it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", bound.(*syscall.SockaddrInet4).Port)
}

// start starts cmd (what names it), its stdout a pipe it answers, and
// stops it (SIGKILL, continued first if stopped) when the test ends.
func start(t testing.TB, what string, cmd *exec.Cmd) io.Reader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return out
}

// startLine starts cmd, stops it when the test ends, and answers its
// first line on stdout.
func startLine(t testing.TB, cmd *exec.Cmd, what string) string {
	t.Helper()
	out := start(t, what, cmd)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	select {
	case line := <-lines:
		return line
	case <-time.After(20 * time.Second):
		t.Fatalf("%s printed nothing in 20s", what)
		return ""
	}
}

// connect connects to addr and closes the store when the test ends.
func connect(t testing.TB, addr string, opts ...ConnectOption) *Store {
	t.Helper()
	store, err := Connect(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// startStore starts a server for the test (startServer) and answers a
// store connected to it.
func startStore(t testing.TB) *Store {
	t.Helper()
	return connect(t, startServer(t).addr)
}

// openLock opens a lock or fails the test.
func openLock(t testing.TB, store *Store, name string, opts ...LockOption) *Lock {
	t.Helper()
	l, err := OpenLock(store, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stats answers a lock's counters (STATS), read on a connection of the
// store's pool.
func stats(t testing.TB, store *Store, lock string) map[string]int64 {
	t.Helper()
	c, err := store.pool.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer store.pool.put(c)
	r := <-c.request("STATS", lock).reply
	if r.err != nil || r.v.kind != '%' {
		t.Fatalf("STATS %s: %v %+v", lock, r.err, r.v)
	}
	m := map[string]int64{}
	for i := 0; i+1 < len(r.v.items); i += 2 {
		m[r.v.items[i].text] = r.v.items[i+1].num
	}
	return m
}

// waitUntil polls cond every 10ms until it holds, failing after timeout.
func waitUntil(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitersAre waits until lock's key line holds n waiters.
func waitersAre(t testing.TB, store *Store, lock string, n int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d waiters on %s", n, lock), 20*time.Second, func() bool {
		return stats(t, store, lock)["waiters"] == n
	})
}

// nothing is a hold's function that does nothing: the hold is what the
// test looks at.
func nothing(context.Context, *Lease) error { return nil }

// holdAsync runs a Hold in a goroutine: its answer comes on the channel.
func holdAsync(ctx context.Context, l *Lock, key any, fn func(context.Context, *Lease) error, opts ...HoldOption) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Hold(ctx, key, fn, opts...) }()
	return done
}

// holdForFence starts a hold of key that waits up to wait and lets go at
// once: its fence comes on the first channel, its answer on the second.
func holdForFence(l *Lock, key any, wait time.Duration) (<-chan uint64, <-chan error) {
	fence := make(chan uint64, 1)
	done := holdAsync(context.Background(), l, key, func(ctx context.Context, lease *Lease) error {
		fence <- lease.Fence
		return nil
	}, Wait(wait))
	return fence, done
}

// backgroundHold is a hold of one key that a goroutine keeps until
// release: what a test puts in the way of the holds it watches.
type backgroundHold struct {
	lease *Lease
	letGo chan struct{}
	done  <-chan error
}

// holdInBackground holds key in a goroutine and answers once it is
// granted; the hold lasts until release.
func holdInBackground(t testing.TB, l *Lock, key any) *backgroundHold {
	t.Helper()
	granted := make(chan *Lease, 1)
	h := &backgroundHold{letGo: make(chan struct{})}
	h.done = holdAsync(context.Background(), l, key, func(ctx context.Context, lease *Lease) error {
		granted <- lease
		<-h.letGo
		return nil
	})
	h.lease = awaitGrant(t, key, granted, h.done)
	return h
}

// awaitGrant waits for the grant of a hold running in a goroutine; a hold
// that fails first fails the test.
func awaitGrant(t testing.TB, key any, granted <-chan *Lease, done <-chan error) *Lease {
	t.Helper()
	select {
	case lease := <-granted:
		return lease
	case err := <-done:
		t.Fatalf("the hold of %v: %v", key, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the hold of %v: no grant within 10s", key)
	}
	return nil
}

// release ends the hold and fails the test if the hold failed.
func (h *backgroundHold) release(t testing.TB) {
	t.Helper()
	close(h.letGo)
	if err := within(t, "the background hold's end", 10*time.Second, h.done); err != nil {
		t.Fatal(err)
	}
}

// losingHold is a hold that a goroutine keeps until its lease is lost.
type losingHold struct {
	lease *Lease
	lost  <-chan loss  // when and why its context ended
	done  <-chan error // the Hold's answer
}

// loss is when a hold's context ended, and its cause.
type loss struct {
	at    time.Time
	cause error
}

// holdUntilLost holds key in a goroutine until its lease is lost, and
// answers once it is granted.
func holdUntilLost(t testing.TB, l *Lock, key any) *losingHold {
	t.Helper()
	granted := make(chan *Lease, 1)
	lost := make(chan loss, 1)
	done := holdAsync(context.Background(), l, key, func(ctx context.Context, lease *Lease) error {
		granted <- lease
		<-ctx.Done()
		lost <- loss{time.Now(), Cause(ctx)}
		return nil
	})
	return &losingHold{lease: awaitGrant(t, key, granted, done), lost: lost, done: done}
}

// within fails the test unless ch delivers within d.
func within[T any](t testing.TB, what string, d time.Duration, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
		var zero T
		return zero
	}
}

// proxy is clients/testing/frozen_proxy.py: a TCP forwarder that SIGSTOP
// freezes with its sockets open.
type proxy struct {
	addr string
	cmd  *exec.Cmd
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		skipOrFail(t, "python3 is not installed: the frozen-proxy tests need it")
	}
	script := filepath.Join(repoRoot(t), "clients", "testing", "frozen_proxy.py")
	cmd := exec.Command(python, script, target)
	port := startLine(t, cmd, "frozen_proxy.py")
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("frozen_proxy.py said %q first", port)
	}
	return &proxy{addr: "127.0.0.1:" + port, cmd: cmd}
}

func (p *proxy) freeze(t testing.TB) { signal(t, p.cmd, syscall.SIGSTOP) }
func (p *proxy) thaw(t testing.TB)   { signal(t, p.cmd, syscall.SIGCONT) }

func signal(t testing.TB, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// lines reads a process's stdout lines into a channel.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			ch <- s.Text()
		}
		close(ch)
	}()
	return ch
}

// proc is a process a test started: its stdin, and its stdout's lines.
type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out <-chan string
}

// startProc starts cmd (what names it) with a pipe to its stdin and the
// test's stderr, and stops it when the test ends.
func startProc(t testing.TB, what string, cmd *exec.Cmd) *proc {
	t.Helper()
	in, _ := cmd.StdinPipe()
	cmd.Stderr = os.Stderr
	return &proc{cmd: cmd, in: in, out: lines(start(t, what, cmd))}
}

// said answers the process's next line.
func (p *proc) said(t testing.TB, what string) string {
	t.Helper()
	return within(t, what, 20*time.Second, p.out)
}

// fenceOf reads a holder's "held FENCE".
func fenceOf(t testing.TB, line string) uint64 {
	t.Helper()
	f, ok := cutPrefix(line, "held ")
	fence, err := strconv.ParseUint(f, 10, 64)
	if !ok || err != nil {
		t.Fatalf("the holder said %q", line)
	}
	return fence
}

// goBuild builds package pkg of the module in dir into the binary out,
// with the go command of this test's toolchain (else the one on PATH),
// no module proxy and no workspace, env added to the environment; -short
// skips the test.
func goBuild(t testing.TB, dir, pkg, out string, env ...string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("builds %s (-short)", pkg)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command to build %s with", pkg)
		}
	}
	build := exec.Command(goBin, "build", "-o", out, pkg)
	build.Dir = dir
	build.Env = append(append(os.Environ(), "GOPROXY=off", "GOWORK=off"), env...)
	if output, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, output)
	}
}

// goHolder is this test binary run as a holder process (holderProcess).
type goHolder struct {
	*proc
	fence uint64
}

// startGoHolder starts a holder process for lock's key with ttl, and
// waits until it holds the key.
func startGoHolder(t testing.TB, addr, lock, key string, ttl time.Duration) *goHolder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("LOCKS_TEST_HOLDER=%s %s %s %d", addr, lock, key, ttl.Milliseconds()))
	p := startProc(t, "the holder process", cmd)
	return &goHolder{proc: p, fence: fenceOf(t, p.said(t, "the holder process's grant"))}
}

// holderProcess is the holder's side: LOCKS_TEST_HOLDER="ADDR LOCK KEY
// TTL_MS". It prints "held FENCE", answers each "look" line on stdin
// with "look held" or "look lost TEXT" (the first thing it does on that
// line is ask its context), leaves on "release" or the end of stdin, and
// prints "exit ok" or "exit TEXT".
func holderProcess(spec string) int {
	var addr, lock, key string
	var ttlMs int64
	if _, err := fmt.Sscan(spec, &addr, &lock, &key, &ttlMs); err != nil {
		fmt.Println("exit bad spec:", err)
		return 2
	}
	ctx := context.Background()
	store, err := Connect(ctx, addr)
	if err != nil {
		fmt.Println("exit", err)
		return 1
	}
	defer store.Close()
	l, err := OpenLock(store, lock, TTL(time.Duration(ttlMs)*time.Millisecond))
	if err != nil {
		fmt.Println("exit", err)
		return 1
	}
	stdin := lines(os.Stdin)
	err = l.Hold(ctx, key, func(ctx context.Context, lease *Lease) error {
		fmt.Println("held", lease.Fence)
		for line := range stdin {
			if line != "look" {
				break
			}
			if ctx.Err() != nil {
				fmt.Println("look lost", Cause(ctx))
			} else {
				fmt.Println("look held")
			}
		}
		return nil
	}, Wait(60*time.Second))
	if err != nil {
		fmt.Println("exit", err)
	} else {
		fmt.Println("exit ok")
	}
	return 0
}

// sharedTable is clients/texts.json: the texts every client makes itself,
// byte for byte alike, and the rules' numbers they all keep.
type sharedTable struct {
	Texts map[string]string `json:"texts"`
	Rules map[string]any    `json:"rules"`
}

// readSharedTable reads clients/texts.json.
func readSharedTable(t *testing.T) sharedTable {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "clients", "texts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table sharedTable
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	return table
}

// texts reads clients/texts.json's texts.
func texts(t *testing.T) map[string]string {
	t.Helper()
	return readSharedTable(t).Texts
}

// ruleNumber reads a number of clients/texts.json's rules.
func ruleNumber(t *testing.T, name string) int {
	t.Helper()
	n, ok := readSharedTable(t).Rules[name].(float64)
	if !ok {
		t.Fatalf("clients/texts.json has no number rule %q", name)
	}
	return int(n)
}

// expectText checks err against the table's text name, its placeholders
// filled from vars ({reason} matches any text), and its kind.
func expectText(t *testing.T, table map[string]string, name string, vars map[string]string, sentinel, err error) {
	t.Helper()
	template, ok := table[name]
	if !ok {
		t.Fatalf("clients/texts.json has no text %q", name)
	}
	for _, field := range regexp.MustCompile(`\{([a-z]+)\}`).FindAllStringSubmatch(template, -1) {
		if _, ok := vars[field[1]]; !ok && field[1] != "reason" {
			t.Fatalf("%s: the placeholder {%s} left unfilled", name, field[1])
		}
	}
	pattern := regexp.QuoteMeta(template)
	for k, v := range vars {
		pattern = strings.ReplaceAll(pattern, regexp.QuoteMeta("{"+k+"}"), regexp.QuoteMeta(v))
	}
	pattern = strings.ReplaceAll(pattern, regexp.QuoteMeta("{reason}"), ".+")
	if err == nil || !regexp.MustCompile("^"+pattern+"$").MatchString(err.Error()) {
		t.Errorf("%s: got %v, want %s", name, err, template)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: %v is not %v", name, err, sentinel)
	}
}

// fakeServer answers each connection's commands with script; a reply of
// "" answers nothing, "CLOSE" closes the connection. A CLUSTER command the
// script leaves unanswered ("") is answered as a single server answers
// it; silentReply answers nothing to it either.
func fakeServer(t *testing.T, script func(args []string) string) string {
	t.Helper()
	return startFakeNode(t, script).addr
}

// fakeNode is a scripted server that a test can kill: its port refuses
// connections from then on, and its connections close.
type fakeNode struct {
	addr   string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

// startFakeNode starts a fakeServer and kills it when the test ends.
func startFakeNode(t *testing.T, script func(args []string) string) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(n.kill)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.mu.Lock()
			if n.killed {
				n.mu.Unlock()
				_ = c.Close()
				return
			}
			n.conns = append(n.conns, c)
			n.mu.Unlock()
			n.wg.Add(1)
			go func() { defer n.wg.Done(); serveFake(c, script) }()
		}
	}()
	return n
}

// kill closes the node's port and every connection to it, and waits
// until its goroutines are done.
func (n *fakeNode) kill() {
	_ = n.ln.Close()
	n.mu.Lock()
	n.killed = true
	for _, c := range n.conns {
		_ = c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

func serveFake(c net.Conn, script func(args []string) string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		v, err := readValue(r, DefaultMaxReplyBytes)
		if err != nil {
			return
		}
		args := make([]string, len(v.items))
		for i, item := range v.items {
			args[i] = item.text
		}
		reply := script(args)
		if reply == "" && len(args) > 0 && strings.EqualFold(args[0], "CLUSTER") {
			reply = singleNodeReply
		}
		switch reply {
		case "", silentReply:
		case "CLOSE":
			return
		default:
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	}
}

// bulkReply is s as a RESP bulk string, as a scripted server writes it.
func bulkReply(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// helloReply is a scripted server's answer to HELLO.
const helloReply = "%2\r\n+server\r\n+holdline\r\n+proto\r\n:3\r\n"

// grantReply grants a HOLD: lease 1, fence 5.
const grantReply = "*2\r\n:1\r\n:5\r\n"

// silentReply: a script's reply for nothing to be answered, whatever the
// command (a CLUSTER one too).
const silentReply = "SILENT"

// singleNodeReply: what a server without --etcd answers every CLUSTER
// subcommand (Redis's text).
const singleNodeReply = "-ERR This instance has cluster support disabled\r\n"
