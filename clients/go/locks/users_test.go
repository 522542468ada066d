package locks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// Connecting as a user (holdline serve --users): the user in the address
// and as the User option, the HELLO 3 AUTH USER TOKEN said, bad names
// refused with the shared texts, and NOPERM (a lock the user may not name)
// as kind invalid with the server's line, matching ErrNoPerm and
// ErrInvalid; against a scripted server, then a real one.

const nopermLine = `NOPERM user team-b may not use lock "payments"`

func TestAURLNamesItsUserBeforeTheToken(t *testing.T) {
	cases := []struct{ in, user, token string }{
		{"redis://alice:s3cret@h:1", "alice", "s3cret"},
		{"rediss://alice:s3cret@h", "alice", "s3cret"},
		{"redis://:s3cret@h", "", "s3cret"},
		{"redis://default:s3cret@h", "default", "s3cret"},
		{"redis://alice:tok:en@h", "alice", "tok:en"},
		{"redis://team-b.ops_1:t@h", "team-b.ops_1", "t"},
		{"redis://a%3Ab%40c:t@h", "a:b@c", "t"},
		{"redis://a@b:t@h", "a@b", "t"},
		{"redis://" + strings.Repeat("u", 64) + ":t@h", strings.Repeat("u", 64), "t"},
	}
	for _, c := range cases {
		a, err := parseAddress(c.in)
		if err != nil || a.user != c.user || a.token != c.token || !a.hasToken {
			t.Errorf("%s: %+v %v", c.in, a, err)
		}
	}
}

func TestTheOptionsWinOverTheURLs(t *testing.T) {
	auth := func(addr string, opts ...ConnectOption) *credentials {
		t.Helper()
		seeds, bad := parseAddresses(addr)
		if bad != nil {
			t.Fatal(bad)
		}
		var cfg connectConfig
		cfg.token, cfg.useToken = seeds[0].token, seeds[0].hasToken
		for _, opt := range opts {
			opt(&cfg)
		}
		if err := cfg.resolveAuth(seeds[0]); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		return cfg.auth
	}
	url := "redis://alice:from-url@h"
	cases := []struct {
		got  *credentials
		want *credentials
	}{
		{auth(url), &credentials{"alice", "from-url"}},
		{auth(url, User("bob")), &credentials{"bob", "from-url"}},
		{auth(url, Token("given")), &credentials{"alice", "given"}},
		{auth(url, User("bob"), Token("given")), &credentials{"bob", "given"}},
		{auth("redis://:t@h", User("bob")), &credentials{"bob", "t"}},
		{auth("h:1", User("bob"), Token("t")), &credentials{"bob", "t"}},
		{auth("h:1", Token("t")), &credentials{"default", "t"}},
		{auth("h:1"), nil},
	}
	for i, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("case %d: %+v, want %+v", i, c.got, c.want)
		}
	}
}

func TestBadUserNamesAreRefusedWithTheSharedTexts(t *testing.T) {
	userTexts(t, texts(t))
}

// userTexts: a bad user in a URL is a bad address; a bad User option is
// bad_user; a user without a token is user_without_token. Nothing is
// dialled for any of them.
func userTexts(t *testing.T, table map[string]string) {
	ctx := context.Background()
	for _, bad := range []string{"redis://alice@h", "redis://alice:@h", "redis://al%20ice:t@h", "rediss://é:t@h"} {
		_, err := Connect(ctx, bad)
		expectText(t, table, "bad_address", map[string]string{"address": showKey(bad)}, ErrInvalid, err)
	}
	for _, bad := range []string{"", "al ice", "a/b", "é", strings.Repeat("u", 65)} {
		_, err := Connect(ctx, "127.0.0.1:1", User(bad), Token("t"))
		expectText(t, table, "bad_user", map[string]string{"user": showKey(bad)}, ErrInvalid, err)
	}
	_, err := Connect(ctx, "redis://127.0.0.1:1", User("alice"))
	expectText(t, table, "user_without_token", map[string]string{"user": `"alice"`}, ErrInvalid, err)
}

// nopermServer is a scripted server whose user may not name the lock
// payments; it records each HELLO.
func nopermServer(t *testing.T) (addr string, hellos func() []string) {
	var mu sync.Mutex
	var said []string
	addr = fakeServer(t, func(args []string) string {
		switch {
		case args[0] == "HELLO":
			mu.Lock()
			said = append(said, strings.Join(args, " "))
			mu.Unlock()
			return helloReply
		case args[0] == "CLUSTER":
			return ""
		case len(args) > 1 && args[1] == "payments":
			return "-" + nopermLine + "\r\n"
		case args[0] == "HOLD" || args[0] == "TRYHOLD":
			return grantReply
		case args[0] == "PING":
			return "+PONG\r\n"
		}
		return "+OK\r\n"
	})
	return addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := said
		said = nil
		return out
	}
}

func TestHelloSaysTheUserAndTheToken(t *testing.T) {
	at, hellos := nopermServer(t)
	cases := []struct {
		addr  string
		opts  []ConnectOption
		hello string
	}{
		{"redis://alice:tok@" + at, nil, "HELLO 3 AUTH alice tok"},
		{"redis://:tok@" + at, nil, "HELLO 3 AUTH default tok"},
		{"redis://default:tok@" + at, nil, "HELLO 3 AUTH default tok"},
		{at, []ConnectOption{Token("tok")}, "HELLO 3 AUTH default tok"},
		{at, []ConnectOption{User("bob"), Token("t2")}, "HELLO 3 AUTH bob t2"},
		{"redis://alice:tok@" + at, []ConnectOption{User("bob")}, "HELLO 3 AUTH bob tok"},
		{"redis://alice:tok@" + at, []ConnectOption{Token("t2")}, "HELLO 3 AUTH alice t2"},
		{"redis://:tok@" + at, []ConnectOption{User("team-b.ops:1@x")}, "HELLO 3 AUTH team-b.ops:1@x tok"},
		{at, nil, "HELLO 3"},
	}
	ctx := context.Background()
	for _, c := range cases {
		store := connect(t, c.addr, c.opts...)
		lock := openLock(t, store, "team-a.jobs")
		// Two holds at once: two connections.
		err := lock.Hold(ctx, "k", func(ctx context.Context, _ *Lease) error {
			return lock.Hold(ctx, "k2", nothing)
		})
		if err != nil {
			t.Fatalf("%s: %v", c.addr, err)
		}
		_ = store.Close()
		said := hellos()
		if len(said) < 2 {
			t.Errorf("%s: %q", c.addr, said)
		}
		for _, h := range said {
			if h != c.hello {
				t.Errorf("%s: said %q, want %q", c.addr, h, c.hello)
			}
		}
	}
}

// expectNoPerm: err is NOPERM with the text line, kind invalid.
func expectNoPerm(t *testing.T, what, line string, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindInvalid || err.Error() != line {
		t.Errorf("%s: %v", what, err)
	}
	if !errors.Is(err, ErrNoPerm) || !errors.Is(err, ErrInvalid) {
		t.Errorf("%s: %v is not both ErrNoPerm and ErrInvalid", what, err)
	}
}

func TestNoPermIsInvalidWithTheServersTextFromAnyCommand(t *testing.T) {
	at, _ := nopermServer(t)
	store := connect(t, "redis://team-b:tok@"+at)
	ctx := context.Background()
	payments := openLock(t, store, "payments")
	noop := nothing
	expectNoPerm(t, "HOLD", nopermLine, payments.Hold(ctx, "k", noop))
	_, err := payments.TryHold(ctx, "k", noop)
	expectNoPerm(t, "TRYHOLD", nopermLine, err)
	_, err = payments.Inspect(ctx, "k")
	expectNoPerm(t, "INSPECT", nopermLine, err)
	// The connection is fine: a lock the user may use is granted.
	if err := openLock(t, store, "team-a.jobs").Hold(ctx, "k", noop); err != nil {
		t.Fatal(err)
	}
	// Other refusals are not NOPERM.
	for _, line := range []string{"ERR unknown command 'NOPE'", "NOPERMS x", "INVALID NOPERM x"} {
		if err := fromReply(line, "l", "k"); errors.Is(err, ErrNoPerm) {
			t.Errorf("%q is ErrNoPerm", line)
		}
	}
	if err := fromReply(nopermLine, "l", "k").withCause(errors.New("x")); !errors.Is(err, ErrNoPerm) {
		t.Errorf("a copy lost its NOPERM")
	}
}

func TestARealServerWithUsersChecksEachUsersLocks(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users")
	users := "alice alice-token-0123456789 locks=team-a.*\nroot root-token-0123456789 admin\n"
	if err := os.WriteFile(file, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--users", file)
	ctx := context.Background()
	alice := connect(t, "redis://alice:alice-token-0123456789@"+srv.addr)
	var fence uint64
	err := openLock(t, alice, "team-a.jobs").Hold(ctx, "k", func(_ context.Context, l *Lease) error {
		fence = l.Fence
		return nil
	})
	if err != nil || fence == 0 {
		t.Fatalf("team-a.jobs: %v (fence %d)", err, fence)
	}
	err = openLock(t, alice, "payments").Hold(ctx, "k", nothing)
	expectNoPerm(t, "payments", `NOPERM user alice may not use lock "payments"`, err)
	// The options, and an admin, who may use any lock.
	root := connect(t, srv.addr, User("root"), Token("root-token-0123456789"))
	if err := openLock(t, root, "payments").Hold(ctx, "k", nothing); err != nil {
		t.Fatal(err)
	}
	table := texts(t)
	for _, url := range []string{
		"redis://alice:wrong-token-0123456789@" + srv.addr,
		"redis://mallory:alice-token-0123456789@" + srv.addr,
	} {
		_, err := Connect(ctx, url)
		expectText(t, table, "token_refused", nil, ErrInvalid, err)
	}
}
