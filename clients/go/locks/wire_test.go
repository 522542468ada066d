package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Orderings a real server makes only by chance, played by a scripted one.

const ranOut = `lock l: key "k": the lease was lost: it ran out (ttl 300ms)`

// lateGrantServer grants the HOLD only when the fourth PING comes (the
// client PINGs every third of the ttl while it waits, so past the ttl),
// the PINGs' answers right behind the grant, and answers RENEW with
// renew; "" leaves it, and everything after it, unanswered (a server
// answers in order). It records the PINGs' times and every command.
type lateGrantServer struct {
	ttl      time.Duration
	mu       sync.Mutex
	holdSent time.Time
	pings    []time.Time
	commands []string
}

func (s *lateGrantServer) start(t *testing.T, renew string) string {
	waiting, silent := false, false
	return fakeServer(t, func(args []string) string {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.commands = append(s.commands, args[0])
		switch {
		case silent:
		case args[0] == "RENEW" && renew == "":
			silent = true
		case args[0] == "HELLO":
			return helloReply
		case args[0] == "HOLD":
			s.holdSent, waiting = time.Now(), true
		case args[0] == "PING" && waiting:
			if s.pings = append(s.pings, time.Now()); len(s.pings) == 4 {
				waiting = false
				return "*2\r\n:1\r\n:5\r\n" + strings.Repeat("+PONG\r\n", 4)
			}
		case args[0] == "RENEW":
			return renew
		case args[0] == "RELEASE":
			if strings.HasPrefix(renew, "-") {
				return renew
			}
			return "+OK\r\n"
		case args[0] == "PING":
			return "+PONG\r\n"
		}
		return ""
	})
}

// checkPings: the PINGs went out every third of the ttl while the HOLD
// waited.
func (s *lateGrantServer) checkPings(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	least := s.ttl/3 - 10*time.Millisecond
	if first := s.pings[0].Sub(s.holdSent); first < least {
		t.Fatalf("the first PING %v after the HOLD", first)
	}
	for i := 1; i < len(s.pings); i++ {
		if gap := s.pings[i].Sub(s.pings[i-1]); gap < least {
			t.Fatalf("PINGs %v apart", gap)
		}
	}
}

// A grant that comes a ttl after its HOLD, with the answers to the PINGs
// sent while it waited right behind it: those answers prove nothing (PING
// does not look at the lease, and a PING held up in the network past the
// lease's end is still answered), so a RENEW must confirm the grant. The
// server answers that the lease ran out: the hold fails with its text,
// and the function never runs.
func TestALateGrantWhoseRenewIsAnsweredLostNeverRuns(t *testing.T) {
	srv := lateGrantServer{ttl: 300 * time.Millisecond}
	addr := srv.start(t, "-LOST "+ranOut+"\r\n")
	l := openLock(t, connect(t, addr), "l", TTL(srv.ttl))
	ran := false
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		ran = true
		return nil
	})
	var e *Error
	if ran || !errors.Is(err, ErrLost) || err.Error() != ranOut || !errors.As(err, &e) || e.Key != "k" {
		t.Fatalf("ran %v: %v", ran, err)
	}
	srv.checkPings(t)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if got := strings.Join(srv.commands, " "); !strings.HasSuffix(got, "PING PING PING PING RENEW RELEASE") {
		t.Fatalf("commands: %s", got)
	}
}

// The same late grant confirmed by RENEW OK runs, and its lease counts
// from that RENEW: held at the function's first look, and held on through
// renewals for longer than the ttl.
func TestALateGrantConfirmedByRenewIsHeld(t *testing.T) {
	srv := lateGrantServer{ttl: 800 * time.Millisecond}
	addr := srv.start(t, "+OK\r\n")
	l := openLock(t, connect(t, addr), "l", TTL(srv.ttl))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		if ctx.Err() != nil || lease.Err() != nil || lease.Fence != 5 {
			return fmt.Errorf("at the first look: %v %v, fence %d", ctx.Err(), lease.Err(), lease.Fence)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lost while renewed: %v", Cause(ctx))
		case <-time.After(srv.ttl * 3 / 2):
			return nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.checkPings(t)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if got := strings.Join(srv.commands, " "); !strings.Contains(got, "HOLD PING PING PING PING RENEW") {
		t.Fatalf("commands: %s", got)
	}
}

// A late grant whose RENEW is not answered within the ttl (at least 1s)
// fails lost, its function unrun.
func TestALateGrantWhoseRenewIsNotAnsweredNeverRuns(t *testing.T) {
	srv := lateGrantServer{ttl: 300 * time.Millisecond}
	addr := srv.start(t, "")
	l := openLock(t, connect(t, addr), "l", TTL(srv.ttl))
	ran := false
	start := time.Now()
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		ran = true
		return nil
	})
	want := `lock l: key "k": the lease was lost: the server answered nothing for its ttl (300ms)`
	if ran || !errors.Is(err, ErrLost) || err.Error() != want {
		t.Fatalf("ran %v: %v", ran, err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("gave up on the RENEW after %v", took)
	}
}

// A grant in time with a lost push in the same write: the hold answers
// the server's text (its function, if it ran, saw its context end).
func TestAGrantAndItsLossInOneWrite(t *testing.T) {
	addr := fakeServer(t, func(args []string) string {
		switch args[0] {
		case "HELLO":
			return helloReply
		case "HOLD":
			return "*2\r\n:1\r\n:5\r\n" +
				">3\r\n$4\r\nlost\r\n:1\r\n$" + strconv.Itoa(len(ranOut)) + "\r\n" + ranOut + "\r\n"
		case "RELEASE":
			return "-LOST " + ranOut + "\r\n"
		}
		return "+PONG\r\n"
	})
	l := openLock(t, connect(t, addr), "l", TTL(300*time.Millisecond))
	err := l.Hold(context.Background(), "k", func(ctx context.Context, lease *Lease) error {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the push did not end the context")
		}
	})
	if !errors.Is(err, ErrLost) || err.Error() != ranOut {
		t.Fatalf("%v", err)
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
