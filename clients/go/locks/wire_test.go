package locks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Orderings a real server makes only by chance, played by a scripted one.

const ranOut = `lock l: key "k": the lease was lost: it ran out (ttl 300ms)`

// lostReply is the server's answer that the lease ran out.
const lostReply = "-LOST " + ranOut + "\r\n"

// grantingScript is a scripted server's script: HELLO answered, every
// HOLD answered hold, RENEW renew and RELEASE release; those left "" and
// the rest answered PONG.
func grantingScript(hold, renew, release string) func([]string) string {
	return func(args []string) string {
		replies := map[string]string{"HELLO": helloReply, "HOLD": hold, "RENEW": renew, "RELEASE": release}
		if reply := replies[args[0]]; reply != "" {
			return reply
		}
		return "+PONG\r\n"
	}
}

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
				return grantReply + strings.Repeat("+PONG\r\n", 4)
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

// said is the commands the server was sent, in order.
func (s *lateGrantServer) said() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.commands, " ")
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
// lease's end is still answered), so a RENEW must confirm the grant. When
// the RENEW fails the hold fails lost and the function never runs: the
// server answers that the lease ran out (the hold answers its text), or
// answers nothing within the ttl (at least 1s).
func TestALateGrantWhoseRenewFailsNeverRuns(t *testing.T) {
	for _, c := range []struct {
		name, renew, want string
		// Checked when not empty or zero: how the commands end; the
		// least time the hold takes to fail.
		saidLast string
		atLeast  time.Duration
	}{
		{"answered lost", lostReply, ranOut, "PING PING PING PING RENEW RELEASE", 0},
		{"not answered", "", `lock l: key "k": the lease was lost: the server answered nothing for its ttl (300ms)`, "", time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := lateGrantServer{ttl: 300 * time.Millisecond}
			l := openLock(t, connect(t, srv.start(t, c.renew)), "l", TTL(srv.ttl))
			ran := false
			start := time.Now()
			err := l.Hold(context.Background(), "k", func(context.Context, *Lease) error {
				ran = true
				return nil
			})
			var e *Error
			if ran || !errors.Is(err, ErrLost) || err.Error() != c.want || !errors.As(err, &e) || e.Key != "k" {
				t.Fatalf("ran %v: %v", ran, err)
			}
			if took := time.Since(start); took < c.atLeast {
				t.Fatalf("gave up on the RENEW after %v", took)
			}
			srv.checkPings(t)
			if got := srv.said(); !strings.HasSuffix(got, c.saidLast) {
				t.Fatalf("commands: %s", got)
			}
		})
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
	if got := srv.said(); !strings.Contains(got, "HOLD PING PING PING PING RENEW") {
		t.Fatalf("commands: %s", got)
	}
}

// A grant in time with a lost push in the same write: the hold answers
// the server's text (its function, if it ran, saw its context end).
func TestAGrantAndItsLossInOneWrite(t *testing.T) {
	push := ">3\r\n" + bulkReply("lost") + ":1\r\n" + bulkReply(ranOut)
	addr := fakeServer(t, grantingScript(grantReply+push, "", lostReply))
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
	addr := fakeServer(t, grantingScript(grantReply, lostReply, lostReply))
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
	addr := fakeServer(t, grantingScript(grantReply, "", lostReply))
	l := openLock(t, connect(t, addr), "l", TTL(300*time.Millisecond))
	err := l.Hold(context.Background(), "k", nothing)
	if !errors.Is(err, ErrLost) || err.Error() != ranOut {
		t.Fatalf("%v", err)
	}
}
