// Package locks is the Go client of holdline: keyed locks with leases,
// served by holdline serve, with Go's goroutines standing in the same
// first-come, first-served lines as the holders of every other client.
//
//	store, err := locks.Connect(ctx, "127.0.0.1:7380")
//	defer store.Close()
//
//	invoices, err := locks.OpenLock(store, "invoices", locks.TTL(10*time.Second))
//	err = invoices.Hold(ctx, invoice.ID, func(ctx context.Context, lease *locks.Lease) error {
//		return charge(ctx, invoice, lease.Fence) // ctx ends when the lease is lost
//	})
//	err = invoices.Hold(ctx, invoice.ID, work, locks.Wait(30*time.Second))
//	acquired, err := invoices.TryHold(ctx, invoice.ID, work)
//
// Errors are *Error values: errors.Is matches them against ErrInUse,
// ErrLost, ErrInvalid, ErrLimit and ErrClosed, errors.As gives their Kind,
// and Error() is the server's text byte for byte.
//
// A server that speaks TLS is reached with a rediss:// address, or with
// the TLS option and the server's CA (and a client certificate when the
// server wants one).
//
// Connect takes several addresses, separated by commas, for the nodes of
// a cluster (holdline serve --etcd): each key's holds then go to the node
// that serves the key's slot.
//
// A key may have several permits (OpenLock with Permits): each hold takes
// one, or Take's count, or all of them with Exclusive, which makes
// semaphores and read-write locks. The line stays first come, first
// served, with no overtaking.
//
// A hold may carry a note (the Note option), shown with its holder. An
// Election (Lock.Election) is a hold with a note plus an observer, with
// etcd's shape: Campaign, Leadership.Proclaim, Leader and Observe.
//
// A lease stays safe across a network: the client takes it for lost (and
// ends its function's context) by the time the server may give the key to
// someone else, even when the server cannot be heard from at all.
package locks
