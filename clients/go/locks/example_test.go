package locks_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log"
	"os"
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

// A server that speaks TLS (holdline serve --tls-cert --tls-key) with a
// CA of its own, and wants client certificates (--tls-client-ca).
func ExampleTLS() {
	caPEM, err := os.ReadFile("ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	mine, err := tls.LoadX509KeyPair("client.pem", "client.key")
	if err != nil {
		log.Fatal(err)
	}
	config := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{mine}}
	store, err := locks.Connect(context.Background(), "rediss://locks.internal:7380", locks.TLS(config))
	if err != nil {
		log.Fatal(err) // a failed handshake: "store: TLS with ... failed (...): closed"
	}
	defer store.Close()
}

// A server with users (holdline serve --users): connect as one; a lock
// it may not name answers an error that is both ErrNoPerm and ErrInvalid.
func ExampleUser() {
	ctx := context.Background()
	// Or "redis://alice:alice-token@locks.internal:7380".
	store, err := locks.Connect(ctx, "locks.internal:7380", locks.User("alice"), locks.Token("alice-token"))
	if err != nil {
		log.Fatal(err) // a wrong user or token: "store: the server refused the token: invalid"
	}
	defer store.Close()
	payments, _ := locks.OpenLock(store, "payments")
	err = payments.Hold(ctx, 9, func(context.Context, *locks.Lease) error { return nil })
	if errors.Is(err, locks.ErrNoPerm) {
		log.Print(err) // NOPERM user alice may not use lock "payments"
	}
}

// Who holds a key, and how many wait behind them.
func ExampleLock_Inspect() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	invoices, _ := locks.OpenLock(store, "invoices")
	info, err := invoices.Inspect(ctx, 9)
	switch {
	case err != nil:
		log.Fatal(err)
	case info == nil:
		log.Print("never held, nobody waiting")
	case info.Held && info.Holder != nil:
		log.Printf("held by %s (connection %d), %d waiting", info.Holder.Addr, info.Holder.ID, info.Waiters)
	}
}

// Several nodes of a cluster (holdline serve --etcd ...): any of them
// will do to connect; each hold goes to the node that serves its key.
// A hold cut by a failover answers ErrLost (it was held) or ErrClosed
// (it waited, or no node could take it yet): hold again, and the new
// owner grants it with a greater fence.
func ExampleConnect_cluster() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "10.0.0.1:7380,10.0.0.2:7380,10.0.0.3:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	invoices, _ := locks.OpenLock(store, "invoices")
	for tries := 0; tries < 10; tries++ {
		err = invoices.Hold(ctx, 9, func(ctx context.Context, lease *locks.Lease) error {
			return charge(ctx, lease.Fence)
		})
		if !errors.Is(err, locks.ErrClosed) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func charge(ctx context.Context, fence uint64) error { return ctx.Err() }

// A semaphore: at most five calls to a provider at once, whoever makes
// them; a batch takes two of the five permits.
func ExamplePermits() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	providers, _ := locks.OpenLock(store, "providers", locks.Permits(5))
	err = providers.Hold(ctx, "stripe", func(ctx context.Context, lease *locks.Lease) error {
		return charge(ctx, lease.Fence) // one of at most five at once
	})
	if err != nil {
		log.Fatal(err)
	}
	err = providers.Hold(ctx, "stripe", func(ctx context.Context, lease *locks.Lease) error {
		log.Printf("a batch under %d permits", lease.Permits()) // 2
		return nil
	}, locks.Take(2))
	if err != nil {
		log.Fatal(err)
	}
}

// A read-write lock: readers take one permit and share the key, a writer
// takes all of them and holds it alone. Readers that come after a waiting
// writer wait behind it, so readers never starve a writer.
func ExampleExclusive() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	docs, _ := locks.OpenLock(store, "docs", locks.Permits(1024))
	err = docs.Hold(ctx, "readme", func(ctx context.Context, lease *locks.Lease) error {
		return nil // read, alongside other readers
	})
	if err != nil {
		log.Fatal(err)
	}
	err = docs.Hold(ctx, "readme", func(ctx context.Context, lease *locks.Lease) error {
		return charge(ctx, lease.Fence) // write, alone: writes carry the fence
	}, locks.Exclusive())
	if err != nil {
		log.Fatal(err)
	}
}

// A leader election: one process at a time serves as billing's leader,
// its address in its note for the others to find.
func ExampleElection() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	leaders, _ := locks.OpenLock(store, "leaders", locks.TTL(5*time.Second))
	billing := leaders.Election("billing")
	for ctx.Err() == nil {
		err := billing.Campaign(ctx, "10.0.0.5:8080", func(ctx context.Context, lead *locks.Leadership) error {
			// Lead until ctx ends (the leadership lost); writes carry
			// lead.Fence(), greater than every earlier leader's.
			return charge(ctx, lead.Fence())
		})
		if err != nil && !errors.Is(err, locks.ErrLost) {
			log.Print(err) // the server unreachable, say: campaign again
			time.Sleep(time.Second)
		}
	}
}

// Who leads now, and every change from then on.
func ExampleElection_Observe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	leaders, _ := locks.OpenLock(store, "leaders")
	billing := leaders.Election("billing")
	if leader, err := billing.Leader(ctx); err == nil && leader != nil {
		log.Printf("%s leads, for %v", leader.Note, leader.HeldFor)
	}
	changes, err := billing.Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for leader := range changes { // closed when ctx ends
		if leader == nil {
			log.Print("nobody leads")
		} else {
			log.Printf("%s leads (fence %d)", leader.Note, leader.Fence)
		}
	}
}

// A note says who holds a key, wherever the server shows the holder.
func ExampleNote() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, "127.0.0.1:7380")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	jobs, _ := locks.OpenLock(store, "jobs")
	err = jobs.Hold(ctx, "nightly", func(ctx context.Context, lease *locks.Lease) error {
		info, err := jobs.Inspect(ctx, "nightly")
		if err == nil && info != nil && info.Holder != nil {
			log.Print(info.Holder.Note) // "nightly on host-a"
		}
		return nil
	}, locks.Note("nightly on host-a"))
	if err != nil {
		log.Fatal(err)
	}
}
