package locks

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Orderings a real server makes only by chance, played by a scripted one.

const ranOut = `lock l: key "k": the lease was lost: it ran out (ttl 300ms)`

// PINGs go out every third of the ttl while a HOLD waits; the grant then
// comes with their answers behind it and a lost push in the same write.
// The grant is judged once those answers are in (not lost for the wait),
// and the push ends the function's context.
func TestPingsWhileAHoldWaitsThenAGrantAndItsLossInOneWrite(t *testing.T) {
	var mu sync.Mutex
	var sent time.Time
	var pings []time.Time
	waiting := false
	addr := fakeServer(t, func(args []string) string {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case args[0] == "HELLO":
			return helloReply
		case args[0] == "HOLD":
			sent, waiting = time.Now(), true
		case args[0] == "PING" && waiting:
			if pings = append(pings, time.Now()); len(pings) == 4 {
				waiting = false
				return "*2\r\n:1\r\n:5\r\n" + "+PONG\r\n+PONG\r\n+PONG\r\n+PONG\r\n" +
					">3\r\n$4\r\nlost\r\n:1\r\n$" + strconv.Itoa(len(ranOut)) + "\r\n" + ranOut + "\r\n"
			}
		case args[0] == "RELEASE":
			return "-LOST " + ranOut + "\r\n"
		case args[0] == "PING", args[0] == "RENEW":
			return "+PONG\r\n"
		}
		return ""
	})
	l := openLock(t, connect(t, addr), "l", TTL(300*time.Millisecond))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		if lease.Fence != 5 {
			t.Errorf("fence %d", lease.Fence)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			t.Error("the push did not end the context")
			return nil
		}
	})
	if !errors.Is(err, ErrLost) || err.Error() != ranOut {
		t.Fatalf("%v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first := pings[0].Sub(sent); first < 90*time.Millisecond {
		t.Fatalf("the first PING %v after the HOLD", first)
	}
	for i := 1; i < len(pings); i++ {
		if gap := pings[i].Sub(pings[i-1]); gap < 90*time.Millisecond {
			t.Fatalf("PINGs %v apart", gap)
		}
	}
}

// A RENEW answered LOST (what a client that gets no pushes relies on)
// ends the function's context.
func TestARenewAnsweredLostEndsTheContext(t *testing.T) {
	addr := fakeServer(t, func(args []string) string {
		switch args[0] {
		case "HELLO":
			return helloReply
		case "HOLD":
			return "*2\r\n:1\r\n:5\r\n"
		case "RENEW", "RELEASE":
			return "-LOST " + ranOut + "\r\n"
		}
		return "+PONG\r\n"
	})
	l := openLock(t, connect(t, addr), "l", TTL(300*time.Millisecond))
	var cause error
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		<-ctx.Done()
		cause = Cause(ctx)
		return errors.New("cut short")
	})
	if !errors.Is(err, ErrLost) || err.Error() != ranOut || cause == nil || cause.Error() != ranOut {
		t.Fatalf("%v (cause %v)", err, cause)
	}
	if errors.Unwrap(err) == nil || errors.Unwrap(err).Error() != "cut short" {
		t.Fatalf("the function's error is not wrapped: %v", errors.Unwrap(err))
	}
}

// A RELEASE answered LOST: the loss happened, its news had not come; the
// hold answers it.
func TestAReleaseAnsweredLostIsALoss(t *testing.T) {
	addr := fakeServer(t, func(args []string) string {
		switch args[0] {
		case "HELLO":
			return helloReply
		case "HOLD":
			return "*2\r\n:1\r\n:5\r\n"
		case "RELEASE":
			return "-LOST " + ranOut + "\r\n"
		}
		return "+PONG\r\n"
	})
	l := openLock(t, connect(t, addr), "l", TTL(300*time.Millisecond))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error { return nil })
	if !errors.Is(err, ErrLost) || err.Error() != ranOut {
		t.Fatalf("%v", err)
	}
}
