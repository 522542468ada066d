// Command campaigner is the Go client's campaigner program, which
// clients/testing/election.py drives (clients/testing/CAMPAIGNER.md):
//
//	campaigner --addr HOST:PORT --lock LOCK --name ELECTION --note NOTE --ttl-ms T
//	campaigner --addr HOST:PORT --lock LOCK --name ELECTION --observe
//
// It connects to HOST:PORT, opens lock LOCK with ttl T ms and takes its
// election ELECTION. Campaigning, forever: it campaigns with NOTE; elected,
// it prints "elected", then every 20ms takes the time and looks at the
// leadership's context, printing "leading" with that time while it holds,
// and "lost" at the first look that finds it lost; then it campaigns
// again. A campaign that fails prints "error" and is tried again 100ms
// later. Observing (--observe), it prints each item of the election's
// Observe as "observed", forever.
//
// It prints one JSON object a line on stdout, "ready" first once
// connected; "t" is CLOCK_MONOTONIC in nanoseconds, the clock every
// process of the machine shares.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"holdline/clients/go/locks"
)

// How often a leader looks at its leadership, and how long a failed
// campaign (or connection) waits before it is tried again.
const (
	lookEvery  = 20 * time.Millisecond
	retryAfter = 100 * time.Millisecond
)

func main() {
	flags := flag.NewFlagSet("campaigner", flag.ContinueOnError)
	addr := flags.String("addr", "", "the server, HOST:PORT")
	lockName := flags.String("lock", "", "the lock's name")
	name := flags.String("name", "", "the election's name")
	note := flags.String("note", "", "the note to campaign with")
	ttlMs := flags.Int64("ttl-ms", 2000, "the lock's ttl in milliseconds")
	observe := flags.Bool("observe", false, "observe the election instead of campaigning")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *addr == "" || *lockName == "" || *name == "" || (!*observe && *note == "") || *ttlMs <= 0 {
		fmt.Fprintln(os.Stderr, "usage: campaigner --addr HOST:PORT --lock LOCK --name ELECTION (--note NOTE --ttl-ms T | --observe)")
		os.Exit(2)
	}
	ctx := context.Background()
	store := connect(ctx, *addr)
	defer store.Close()
	lock, err := locks.OpenLock(store, *lockName, locks.TTL(time.Duration(*ttlMs)*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "campaigner:", err)
		os.Exit(2)
	}
	election := lock.Election(*name)
	say(map[string]any{"event": "ready", "t": now(), "pid": os.Getpid()})
	if *observe {
		observeForever(ctx, election)
	}
	campaignForever(ctx, election, *note)
}

// connect connects to addr, trying again every retryAfter until it
// answers (each failure printed as an error).
func connect(ctx context.Context, addr string) *locks.Store {
	for {
		store, err := locks.Connect(ctx, addr)
		if err == nil {
			return store
		}
		sayError(err)
		time.Sleep(retryAfter)
	}
}

// campaignForever campaigns, leads until the leadership is lost, and
// campaigns again.
func campaignForever(ctx context.Context, election *locks.Election, note string) {
	for {
		err := election.Campaign(ctx, note, func(ctx context.Context, lead *locks.Leadership) error {
			fence := lead.Fence()
			say(map[string]any{"event": "elected", "t": now(), "fence": fence})
			for {
				t := now() // before the look: a belief ends no later than its look
				if ctx.Err() != nil {
					say(map[string]any{"event": "lost", "t": now(), "fence": fence})
					return nil
				}
				say(map[string]any{"event": "leading", "t": t, "fence": fence})
				time.Sleep(lookEvery)
			}
		})
		if err != nil && !errors.Is(err, locks.ErrLost) {
			// A lost leadership was printed as lost; anything else is an
			// error of the campaign.
			sayError(err)
			time.Sleep(retryAfter)
		}
	}
}

// observeForever prints every item of the election's Observe; when
// Observe fails (or its channel closes), it is tried again.
func observeForever(ctx context.Context, election *locks.Election) {
	for {
		leaders, err := election.Observe(ctx)
		if err != nil {
			sayError(err)
			time.Sleep(retryAfter)
			continue
		}
		for leader := range leaders {
			if leader == nil {
				say(map[string]any{"event": "observed", "t": now(), "fence": nil, "note": nil})
			} else {
				say(map[string]any{"event": "observed", "t": now(), "fence": leader.Fence, "note": leader.Note})
			}
		}
	}
}

// sayError prints err as an error event, with its kind.
func sayError(err error) {
	kind := "unknown"
	var e *locks.Error
	if errors.As(err, &e) {
		kind = e.Kind.String()
	}
	say(map[string]any{"event": "error", "t": now(), "kind": kind, "text": err.Error()})
}

var out sync.Mutex

// say prints one JSON object a line on stdout, unbuffered.
func say(event map[string]any) {
	line, err := json.Marshal(event)
	if err != nil {
		panic(err)
	}
	out.Lock()
	defer out.Unlock()
	if _, err := os.Stdout.Write(append(line, '\n')); err != nil {
		os.Exit(1) // nobody reads any more
	}
}

// now is CLOCK_MONOTONIC in nanoseconds, as every process of the machine
// reads it (Go's own monotonic clock has a process-local origin).
func now() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}
