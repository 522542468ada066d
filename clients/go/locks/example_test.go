package locks_test

import (
	"context"
	"errors"
	"log"
	"time"

	"holdline/clients/go/locks"
)

// The seed's lines, with the errors a caller branches on.
func Example() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	invoices, err := locks.OpenLock(store, "invoices", locks.TTL(10*time.Second), locks.MaxHold(2*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	err = invoices.Hold(ctx, 9, func(ctx context.Context, lease *locks.Lease) error {
		// Stop as soon as ctx ends: the lease may have been lost. Writes
		// carry lease.Fence, so a store can refuse them once it has seen a
		// newer one.
		return charge(ctx, lease.Fence)
	}, locks.Wait(30*time.Second))
	switch {
	case errors.Is(err, locks.ErrInUse):
		log.Print("someone is charging it already")
	case errors.Is(err, locks.ErrLost):
		log.Printf("the charge may have been cut short: %v", err)
	case err != nil:
		log.Fatal(err)
	}
}

// A hold's function learns why its context ended.
func ExampleCause() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	jobs, _ := locks.OpenLock(store, "jobs", locks.MaxHold(time.Minute))
	_ = jobs.Hold(ctx, "nightly", func(ctx context.Context, lease *locks.Lease) error {
		<-ctx.Done()
		log.Printf("stopped: %v", locks.Cause(ctx)) // the lost error, kind KindLost
		return nil
	})
}

func charge(ctx context.Context, fence uint64) error { return ctx.Err() }
