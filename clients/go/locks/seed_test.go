package locks_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"holdline/clients/go/locks"
)

type Invoice struct{ ID int64 }

// The seed's Go lines, as written, in a test of the package's users.
func TestTheSeedsExampleAsWritten(t *testing.T) {
	ctx := context.Background()
	store, err := locks.Connect(ctx, locks.StartTestServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	invoice := Invoice{ID: 9}
	var charged []uint64
	charge := func(ctx context.Context, invoice Invoice, fence uint64) error {
		charged = append(charged, fence)
		return ctx.Err()
	}
	var worked []string
	work := func(ctx context.Context, lease *locks.Lease) error {
		worked = append(worked, lease.Key)
		return nil
	}
	var said []string
	say := func(s string) { said = append(said, s) }

	invoices, err := locks.OpenLock(store, "invoices", locks.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	err = invoices.Hold(ctx, invoice.ID, func(ctx context.Context, lease *locks.Lease) error {
		return charge(ctx, invoice, lease.Fence) // ctx ends when the lease is lost
	})
	if err != nil {
		t.Fatal(err)
	}
	err = invoices.Hold(ctx, invoice.ID, work, locks.Wait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	acquired, err := invoices.TryHold(ctx, invoice.ID, work)
	if err == nil && !acquired {
		say("someone is charging it already")
	}
	if len(charged) != 1 || charged[0] == 0 || strings.Join(worked, ",") != "9,9" || len(said) != 0 {
		t.Fatalf("charged %v, worked %v, said %v", charged, worked, said)
	}

	// And while someone charges it, TryHold says so without running work.
	err = invoices.Hold(ctx, invoice.ID, func(ctx context.Context, lease *locks.Lease) error {
		return elsewhere(store, invoice, work, say)
	})
	if err != nil || strings.Join(said, ",") != "someone is charging it already" || len(worked) != 2 {
		t.Fatalf("%v: said %v, worked %v", err, said, worked)
	}
}

// elsewhere is another goroutine (another holder) trying the same key,
// through a handle with the seed's maxHold line.
func elsewhere(store *locks.Store, invoice Invoice, work func(context.Context, *locks.Lease) error, say func(string)) error {
	done := make(chan error, 1)
	go func() {
		invoices, err := locks.OpenLock(store, "invoices", locks.TTL(10*time.Second), locks.MaxHold(2*time.Minute))
		if err != nil {
			done <- err
			return
		}
		acquired, err := invoices.TryHold(context.Background(), invoice.ID, work)
		if err == nil && !acquired {
			say("someone is charging it already")
		}
		done <- err
	}()
	return <-done
}

// The seed's Go example, as written, builds and runs as a program outside
// the repository that imports the package through a replace directive.
func TestTheSeedsExampleRunsAsAProgramOutsideTheRepository(t *testing.T) {
	dir := t.TempDir()
	module := filepath.Join(locks.RepoRoot(t), "clients", "go")
	gomod := "module seedcheck\n\ngo 1.19\n\nrequire holdline/clients/go v0.0.0\n\nreplace holdline/clients/go => " + module + "\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), seedProgram)
	locks.GoBuild(t, dir, ".", filepath.Join(dir, "seedcheck"), "GOFLAGS=-mod=mod")
	run := exec.Command(filepath.Join(dir, "seedcheck"), locks.StartTestServer(t))
	out, err := run.CombinedOutput()
	want := "charged 9\nwork 9\nsomeone is charging it already\nok\n"
	if err != nil || !strings.HasPrefix(string(out), "fence ") || !strings.HasSuffix(string(out), want) {
		t.Fatalf("%v:\n%s", err, out)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const seedProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"holdline/clients/go/locks"
)

type Invoice struct{ ID int64 }

func charge(ctx context.Context, invoice Invoice, fence uint64) error {
	fmt.Println("fence", fence)
	fmt.Println("charged", invoice.ID)
	return ctx.Err()
}

func work(ctx context.Context, lease *locks.Lease) error {
	fmt.Println("work", lease.Key)
	return nil
}

func say(s string) { fmt.Println(s) }

func main() {
	ctx := context.Background()
	store, err := locks.Connect(ctx, os.Args[1])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer store.Close()
	invoice := Invoice{ID: 9}

	invoices, err := locks.OpenLock(store, "invoices", locks.TTL(10*time.Second))
	must(err)

	err = invoices.Hold(ctx, invoice.ID, func(ctx context.Context, lease *locks.Lease) error {
		return charge(ctx, invoice, lease.Fence) // ctx ends when the lease is lost
	})
	must(err)
	err = invoices.Hold(ctx, invoice.ID, work, locks.Wait(30*time.Second))
	must(err)

	held := make(chan struct{})
	letGo := make(chan struct{})
	go invoices.Hold(ctx, invoice.ID, func(ctx context.Context, lease *locks.Lease) error {
		close(held)
		<-letGo
		return nil
	})
	<-held

	acquired, err := invoices.TryHold(ctx, invoice.ID, work)
	if err == nil && !acquired {
		say("someone is charging it already")
	}
	must(err)
	close(letGo)
	fmt.Println("ok")
}

func must(err error) {
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
`
