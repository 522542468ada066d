package locks

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The cluster numbers this client keeps are the table's.
func TestTheRoutingRulesAreTheTables(t *testing.T) {
	for name, n := range map[string]int{
		"max_redirects":               maxRedirects,
		"cluster_down_tries":          clusterDownTries,
		"cluster_down_pause_ms":       int(clusterDownPause / time.Millisecond),
		"map_refresh_node_timeout_ms": int(mapRefreshNodeTimeout / time.Millisecond),
		"max_reply_bytes":             DefaultMaxReplyBytes,
	} {
		if want := ruleNumber(t, name); n != want {
			t.Errorf("%s: %d, the table's %d", name, n, want)
		}
	}
}

// fakeHolds: HELLO answered; HOLD as hold says; other commands nothing.
func fakeHolds(hold string) func([]string) string {
	return func(args []string) string {
		switch args[0] {
		case "HELLO":
			return helloReply
		case "HOLD":
			return hold
		}
		return ""
	}
}

func TestTheClientsOwnTextsAreTheSharedTable(t *testing.T) {
	table := texts(t)
	ctx := context.Background()
	t.Run("connect", func(t *testing.T) { connectTexts(t, table) })
	t.Run("impostors", func(t *testing.T) { impostorTexts(t, table) })
	t.Run("proclaim", func(t *testing.T) { proclaimEnded(t, table) })
	t.Run("tokens", func(t *testing.T) { tokens(t, table) })
	t.Run("users", func(t *testing.T) { userTexts(t, table) })
	t.Run("a server whose certificate another CA signed", func(t *testing.T) {
		srv := startTLSServer(t, newCA(t, "server CA"), nil)
		_, err := Connect(ctx, srv.addr, TLS(&tls.Config{RootCAs: newCA(t, "other CA").pool}))
		expectText(t, table, "tls_failed", map[string]string{"hostport": srv.addr}, ErrClosed, err)
	})
	t.Run("a connection closed under a waiting HOLD", func(t *testing.T) {
		store := connect(t, fakeServer(t, fakeHolds("CLOSE")))
		err := openLock(t, store, "inv").Hold(ctx, 9, nothing)
		expectText(t, table, "connection_closed_key", map[string]string{"lock": "inv", "key": `"9"`}, ErrClosed, err)
	})
	t.Run("a connection closed under a lease", func(t *testing.T) {
		granted := false
		store := connect(t, fakeServer(t, func(args []string) string {
			switch {
			case args[0] == "HELLO":
				return helloReply
			case args[0] == "HOLD":
				granted = true
				return grantReply
			case granted:
				return "CLOSE"
			}
			return ""
		}))
		l := openLock(t, store, "inv", TTL(300*time.Millisecond))
		err := l.Hold(ctx, "k", func(ctx context.Context, lease *Lease) error { <-ctx.Done(); return nil })
		expectText(t, table, "lost_connection", map[string]string{"lock": "inv", "key": `"k"`}, ErrLost, err)
	})
	t.Run("a server silent under a lease", func(t *testing.T) {
		store := connect(t, fakeServer(t, fakeHolds(grantReply)))
		l := openLock(t, store, "inv", TTL(300*time.Millisecond))
		err := l.Hold(ctx, "k", func(ctx context.Context, lease *Lease) error { <-ctx.Done(); return nil })
		expectText(t, table, "lost_silent", map[string]string{"lock": "inv", "key": `"k"`, "ttl": "300ms"}, ErrLost, err)
	})
	t.Run("a server silent under a waiting HOLD", func(t *testing.T) {
		store := connect(t, fakeServer(t, fakeHolds("")))
		l := openLock(t, store, "inv", TTL(300*time.Millisecond))
		err := l.Hold(ctx, "k", nothing, Wait(200*time.Millisecond))
		vars := map[string]string{"lock": "inv", "key": `"k"`, "wait": "200ms", "ttl": "1s"}
		expectText(t, table, "wait_silent", vars, ErrClosed, err)
	})
	t.Run("a key sent back and forth between two nodes", func(t *testing.T) {
		expectText(t, table, "moved_loop", map[string]string{"lock": "inv", "key": `"9"`}, ErrClosed, movedLoop(t))
	})
	t.Run("a slot no node serves", func(t *testing.T) {
		vars := map[string]string{"lock": "inv", "key": `"foo"`, "slot": "12182"}
		expectText(t, table, "slot_unserved", vars, ErrClosed, slotUnserved(t))
	})
	t.Run("a lease that cannot follow its partition to another node", func(t *testing.T) {
		expectText(t, table, "reattach_failed", map[string]string{"lock": "l", "key": `"k"`}, ErrLost, reattachFailed(t))
	})
	for name := range table {
		switch name {
		case "bad_address", "bad_user", "user_without_token", "cannot_connect", "connect_silent", "connect_refused", "tls_failed", "connection_closed",
			"token_missing", "token_refused", "connection_closed_key", "lost_connection", "lost_silent", "wait_silent",
			"moved_loop", "slot_unserved", "not_holdline", "not_holdline_unnamed", "not_resp", "reply_too_large",
			"proclaim_ended", "reattach_failed":
		default:
			t.Errorf("clients/texts.json's %q is not provoked here", name)
		}
	}
}

// connectTexts: the texts of a connect that fails.
func connectTexts(t *testing.T, table map[string]string) {
	ctx := context.Background()
	_, err := Connect(ctx, "nope://x")
	expectText(t, table, "bad_address", map[string]string{"address": `"nope://x"`}, ErrInvalid, err)

	dead := refusedAddr(t)
	_, err = Connect(ctx, dead)
	expectText(t, table, "cannot_connect", map[string]string{"hostport": dead}, ErrClosed, err)

	silent := fakeServer(t, func([]string) string { return "" })
	_, err = Connect(ctx, silent, DialTimeout(300*time.Millisecond))
	expectText(t, table, "connect_silent", map[string]string{"hostport": silent, "timeout": "300ms"}, ErrClosed, err)

	hangUp := fakeServer(t, func([]string) string { return "CLOSE" })
	_, err = Connect(ctx, hangUp)
	expectText(t, table, "connection_closed", nil, ErrClosed, err)

	// What a server at its connection limit answers, whatever is sent.
	full := fakeServer(t, func([]string) string { return "-ERR max number of clients reached\r\n" })
	_, err = Connect(ctx, full)
	vars := map[string]string{"hostport": full, "reason": "ERR max number of clients reached"}
	expectText(t, table, "connect_refused", vars, ErrClosed, err)
}

// tokens: a server that wants a token fails the connect without one or
// with a wrong one; a token in the URL works, and the option wins.
func tokens(t *testing.T, table map[string]string) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--token-file", file)
	ctx := context.Background()
	_, err := Connect(ctx, srv.addr)
	expectText(t, table, "token_missing", nil, ErrInvalid, err)
	_, err = Connect(ctx, srv.addr, Token("wrong"))
	expectText(t, table, "token_refused", nil, ErrInvalid, err)
	_, err = Connect(ctx, "redis://:wrong@"+srv.addr, Token("s3cret"+"x"))
	expectText(t, table, "token_refused", nil, ErrInvalid, err)
	for _, ok := range []struct {
		addr string
		opts []ConnectOption
	}{
		{srv.addr, []ConnectOption{Token("s3cret")}},
		{"redis://:s3cret@" + srv.addr, nil},
		{"redis://:wrong@" + srv.addr, []ConnectOption{Token("s3cret")}},
	} {
		store := connect(t, ok.addr, ok.opts...)
		l := openLock(t, store, "tok")
		if err := l.Hold(ctx, strconv.Itoa(len(ok.opts)), nothing); err != nil {
			t.Fatalf("%s: %v", ok.addr, err)
		}
	}
}
