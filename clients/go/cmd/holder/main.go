// Command holder is a holder in a process of its own, for the clients'
// cross-language tests, with the protocol of the Rust client's
// client/examples/holder.rs:
//
//	holder ADDRESS LOCK KEY [TTL_MS] [--permits N] [--take M|all]
//
// It waits for the key (up to 60s), prints "held FENCE", and holds it
// until a line other than "look" arrives on stdin (or stdin closes); then
// it lets the key go and prints "released", or "lost TEXT" when the hold
// failed (the lease lost meanwhile, or never granted). A "look" line
// prints "look held" or "look lost" from the lease's first look after the
// line arrived: a test that stopped this process past its ttl sees whether
// the lease knows from the clock alone.
//
// --permits N opens the lock with N permits per key; --take M takes M of
// them, --take all all of them (exclusive).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"holdline/clients/go/locks"
)

const usage = "usage: holder ADDRESS LOCK KEY [TTL_MS] [--permits N] [--take M|all]"

// spec is what the command line asks for.
type spec struct {
	address, lock, key string
	lockOpts           []locks.LockOption
	holdOpts           []locks.HoldOption
}

func main() {
	s, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: %v\n%s\n", err, usage)
		os.Exit(2)
	}
	if err := run(s); err != nil {
		fmt.Fprintf(os.Stderr, "holder: %v\n", err)
		os.Exit(1)
	}
}

// parse reads the positional arguments and the options, in any order.
func parse(args []string) (spec, error) {
	var s spec
	var positional []string
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		if name != "--permits" && name != "--take" {
			positional = append(positional, args[i])
			continue
		}
		if !inline {
			if i+1 == len(args) {
				return s, fmt.Errorf("%s wants a value", name)
			}
			i++
			value = args[i]
		}
		if err := s.option(name, value); err != nil {
			return s, err
		}
	}
	if len(positional) < 3 || len(positional) > 4 {
		return s, errors.New("ADDRESS LOCK KEY [TTL_MS] expected")
	}
	s.address, s.lock, s.key = positional[0], positional[1], positional[2]
	if len(positional) == 4 {
		ms, err := strconv.ParseInt(positional[3], 10, 64)
		if err != nil {
			return s, fmt.Errorf("bad TTL_MS %q", positional[3])
		}
		s.lockOpts = append(s.lockOpts, locks.TTL(time.Duration(ms)*time.Millisecond))
	}
	return s, nil
}

// option records --permits or --take. Counts the server refuses (0, or
// more than the lock has) are sent as given: the hold then prints the
// server's text as "lost TEXT".
func (s *spec) option(name, value string) error {
	if name == "--take" && strings.EqualFold(value, "all") {
		s.holdOpts = append(s.holdOpts, locks.Exclusive())
		return nil
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return fmt.Errorf("bad %s %q", name, value)
	}
	if name == "--permits" {
		s.lockOpts = append(s.lockOpts, locks.Permits(n))
	} else {
		s.holdOpts = append(s.holdOpts, locks.Take(n))
	}
	return nil
}

// run holds the key as the protocol says. Failing to connect or to open
// the lock is an error of the command (exit 1); the hold's own failure is
// its "lost TEXT" line, as the Rust holder prints it.
func run(s spec) error {
	ctx := context.Background()
	store, err := locks.Connect(ctx, s.address)
	if err != nil {
		return err
	}
	defer store.Close()
	lock, err := locks.OpenLock(store, s.lock, s.lockOpts...)
	if err != nil {
		return err
	}
	opts := append([]locks.HoldOption{locks.Wait(60 * time.Second)}, s.holdOpts...)
	err = lock.Hold(ctx, s.key, func(ctx context.Context, lease *locks.Lease) error {
		fmt.Println("held", lease.Fence)
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() && in.Text() == "look" {
			// ctx.Err reads the clock itself: right after a stop, it
			// already says lost, before any timer or reply.
			if ctx.Err() != nil {
				fmt.Println("look lost")
			} else {
				fmt.Println("look held")
			}
		}
		return nil
	}, opts...)
	if err != nil {
		fmt.Println("lost", err)
	} else {
		fmt.Println("released")
	}
	return nil
}
