package locks

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// foreignHolder is a holder in another process and language: the Rust
// client's holder example, else the Python client's tests/holder.py.
type foreignHolder struct {
	*proc
	what    string
	release func(t testing.TB)
}

// startForeignHolder starts a foreign holder waiting for lock's key (it
// holds once granted, until released). It skips, saying why, when neither
// is at hand (fails under HOLDLINE_REQUIRE_TOOLS=1).
func startForeignHolder(t *testing.T, addr, lock, key string) *foreignHolder {
	t.Helper()
	rust := os.Getenv("HOLDLINE_RUST_HOLDER")
	if rust == "" {
		rust = filepath.Join(repoRoot(t), "target", "release", "examples", "holder")
	}
	var h foreignHolder
	var cmd *exec.Cmd
	if _, err := os.Stat(rust); err == nil {
		// holder ADDRESS LOCK KEY: "held FENCE", a line on stdin lets go.
		h.what, cmd = "the Rust holder", exec.Command(rust, addr, lock, key)
		h.release = func(t testing.TB) {
			if _, err := io.WriteString(h.in, "go\n"); err != nil {
				t.Fatal(err)
			}
			if line := within(t, "the Rust holder's release", 10*time.Second, h.out); line != "released" {
				t.Fatalf("the Rust holder said %q", line)
			}
		}
	} else if python, err := exec.LookPath("python3"); err == nil && exec.Command(python, "-c", "import holdline_client").Run() == nil {
		// holder.py ADDRESS LOCK KEY: "held FENCE", holds until it is lost;
		// ending its process lets the key go.
		script := filepath.Join(repoRoot(t), "clients", "python", "tests", "holder.py")
		h.what, cmd = "the Python holder", exec.Command(python, script, addr, lock, key)
		h.release = func(t testing.TB) { _ = h.cmd.Process.Kill() }
	} else {
		skipOrFail(t, "neither the Rust holder ("+rust+", cargo build --release -p holdline-client --example holder, or HOLDLINE_RUST_HOLDER) nor python3 with the holdline package is at hand")
	}
	h.proc = startProc(t, h.what, cmd)
	return &h
}

func TestFIFOWithAHolderInAnotherProcessAndLanguage(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	l := openLock(t, store, "cross")
	first := holdInBackground(t, l, "k")
	f0 := first.lease.Fence
	foreign := startForeignHolder(t, srv.addr, "cross", "k")
	waitersAre(t, store, "cross", 1)
	third, thirdDone := holdForFence(l, "k", 30*time.Second)
	waitersAre(t, store, "cross", 2)
	first.release(t)
	f1 := fenceOf(t, within(t, foreign.what+"'s grant", 10*time.Second, foreign.out))
	if f1 <= f0 {
		t.Fatalf("%s: fence %d after fence %d", foreign.what, f1, f0)
	}
	select {
	case f := <-third:
		t.Fatalf("the third in line was granted (fence %d) while the second held", f)
	default:
	}
	foreign.release(t)
	if f2 := within(t, "the third grant", 10*time.Second, third); f2 <= f1 {
		t.Fatalf("fences %d, %d, %d", f0, f1, f2)
	}
	if err := <-thirdDone; err != nil {
		t.Fatal(err)
	}
}

func TestAKilledHolderProcessLetsTheKeyGoAtOnce(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	const ttl = 60 * time.Second // far longer than the test: the kill, not the ttl, lets go
	l := openLock(t, store, "killed", TTL(ttl))
	holder := startGoHolder(t, srv.addr, "killed", "k", ttl)
	granted, done := holdForFence(l, "k", ttl)
	waitersAre(t, store, "killed", 1)
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if f := within(t, "the grant after the kill", 20*time.Second, granted); f <= holder.fence {
		t.Fatalf("fence %d after %d", f, holder.fence)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A holder process stopped past its ttl loses its lease to the next in
// line, and once it runs again its first look at the lease says lost.
func TestAStoppedHolderProcessLosesItsLeaseAndSaysSoOnItsFirstLook(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	const ttl = time.Second
	l := openLock(t, store, "stopped", TTL(ttl))
	holder := startGoHolder(t, srv.addr, "stopped", "k", ttl)
	if _, err := io.WriteString(holder.in, "look\n"); err != nil {
		t.Fatal(err)
	}
	if line := within(t, "a look while held", 10*time.Second, holder.out); line != "look held" {
		t.Fatalf("the holder said %q", line)
	}
	granted, done := holdForFence(l, "k", 30*time.Second)
	waitersAre(t, store, "stopped", 1)
	signal(t, holder.cmd, syscall.SIGSTOP)
	if f := within(t, "the grant after the stop", 20*time.Second, granted); f <= holder.fence {
		t.Fatalf("fence %d after %d", f, holder.fence)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The look is asked for while the holder is still stopped, so that it is
	// the first thing it may do on waking, racing its timers and its reader.
	if _, err := io.WriteString(holder.in, "look\n"); err != nil {
		t.Fatal(err)
	}
	signal(t, holder.cmd, syscall.SIGCONT)
	silent := `lock stopped: key "k": the lease was lost: the server answered nothing for its ttl (1s)`
	ranOut := `lock stopped: key "k": the lease was lost: it ran out (ttl 1s)`
	line := within(t, "the first look after the stop", 10*time.Second, holder.out)
	t.Logf("the first look: %s", line)
	if line != "look lost "+silent && line != "look lost "+ranOut {
		t.Fatalf("the holder's first look said %q", line)
	}
	_ = holder.in.Close()
	if line := within(t, "the holder's end", 10*time.Second, holder.out); line != "exit "+silent && line != "exit "+ranOut {
		t.Fatalf("the holder's hold answered %q", line)
	}
}

// The connection dropping (here: the server killed) ends a holder's ctx
// and a waiter's wait, with the client's own texts.
func TestADroppedConnectionEndsHoldsAndWaits(t *testing.T) {
	srv := startServer(t)
	store := connect(t, srv.addr)
	l := openLock(t, store, "drop")
	held := holdUntilLost(t, l, "k")
	waiting := holdAsync(context.Background(), l, "k", nothing, Wait(60*time.Second))
	waitersAre(t, store, "drop", 1)
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	lost := `lock drop: key "k": the lease was lost: its connection to the server closed`
	if err := within(t, "the holder's ctx", 10*time.Second, held.lost).cause; err == nil || err.Error() != lost {
		t.Fatalf("cause: %v", err)
	}
	if err := within(t, "the holder", 10*time.Second, held.done); !errors.Is(err, ErrLost) || err.Error() != lost {
		t.Fatalf("holder: %v", err)
	}
	closed := `lock drop: key "k": the connection to the server closed: closed`
	if err := within(t, "the waiter", 10*time.Second, waiting); !errors.Is(err, ErrClosed) || err.Error() != closed {
		t.Fatalf("waiter: %v", err)
	}
}
