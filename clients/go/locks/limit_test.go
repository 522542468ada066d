package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The line of a key holds 10,000 waiters; the next fails limit at once.
// Each waiting HOLD needs a connection of its own, so the test needs
// about 10,100 file descriptors in this process (and as many in the
// server, which it raises itself).
func TestThe10001stWaiterFailsLimit(t *testing.T) {
	const waiters = 10_000
	const need = waiters + 300
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < need {
		t.Skipf("needs %d file descriptors; the hard limit is %d (raise it with ulimit -Hn)", need, lim.Max)
	}
	if lim.Cur < need {
		raised := lim
		raised.Cur = need
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	}
	srv := startServer(t, "--max-connections", fmt.Sprint(waiters+100))
	// A long ttl: no renewal is due while the test runs.
	store := connect(t, srv.addr, MaxIdleConns(waiters+10))
	l := openLock(t, store, "invoices", TTL(5*time.Minute))
	holder := holdInBackground(t, l, "7")
	warmPool(t, store, waiters)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.Hold(ctx, "7", nothing, Wait(5*time.Minute))
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	counter := connect(t, srv.addr)
	waitUntil(t, "10,000 waiters", 60*time.Second, func() bool { return stats(t, counter, "invoices")["waiters"] == waiters })
	start := time.Now()
	err := openLock(t, counter, "invoices").Hold(context.Background(), 7, nothing, Wait(time.Minute))
	want := `lock invoices: key "7": 10000 waiters already stand in line: limit`
	if !errors.Is(err, ErrLimit) || err.Error() != want {
		t.Fatalf("%v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the 10,001st waiter was answered after %v, not at once", took)
	}
	cancel()
	wg.Wait()
	holder.release(t)
}

// warmPool opens n connections, 64 at a time, and leaves them idle in the
// store's pool, so that n holds started at once do not all dial at once.
func warmPool(t *testing.T, store *Store, n int) {
	t.Helper()
	conns := make([]*conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		i := i
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := dial(context.Background(), store.pool.addr, nil, nil, time.Minute, DefaultMaxReplyBytes)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	store.pool.mu.Lock()
	for _, c := range conns {
		store.pool.all[c] = struct{}{}
	}
	store.pool.mu.Unlock()
	for _, c := range conns {
		store.pool.put(c)
	}
}
