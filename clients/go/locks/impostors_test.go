package locks

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// What Redis 7.0.15 answers HELLO 3, and the same as RESP2's flat array.
const (
	redisHello3 = "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n" +
		"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n" +
		"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
	redisHello2 = "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n" +
		"$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n" +
		"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
	http400 = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
	// randomBytes: no RESP type first, no line end, not all UTF-8.
	randomBytes = "\x9f\x00\xffz\x07\xc3\xa9Q\x01\xfe\x80\x11\x22"
)

// impostor is a server that is not holdline: it answers its first read
// with answer (it closes at once, unread, when answer is empty), then
// sends a byte every 10 ms while trickle, and keeps the connection open
// until the test ends.
func impostor(t *testing.T, answer string, trickle bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if answer == "" {
			return
		}
		buf := make([]byte, 4096)
		if _, err := c.Read(buf); err != nil {
			return
		}
		if _, err := c.Write([]byte(answer)); err != nil {
			return
		}
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if trickle {
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	return ln.Addr().String()
}

// connectFails connects to addr, which must fail within 2 s.
func connectFails(t *testing.T, addr string, opts ...ConnectOption) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	store, err := Connect(ctx, addr, opts...)
	if err == nil {
		store.Close()
		t.Fatalf("connected to %s, which is not holdline", addr)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the connect took %v to fail", took)
	}
	return err
}

// impostorTexts: each server that is not holdline fails the connect with
// its text (the silent one is connectTexts's).
func impostorTexts(t *testing.T, table map[string]string) {
	for _, answer := range []string{redisHello3, redisHello2} {
		addr := impostor(t, answer, false)
		vars := map[string]string{"hostport": addr, "server": "redis 7.0.15"}
		expectText(t, table, "not_holdline", vars, ErrInvalid, connectFails(t, addr))
	}

	unnamed := impostor(t, "%1\r\n$5\r\nproto\r\n:3\r\n", false)
	vars := map[string]string{"hostport": unnamed}
	expectText(t, table, "not_holdline_unnamed", vars, ErrInvalid, connectFails(t, unnamed))

	http := impostor(t, http400, false)
	vars = map[string]string{"hostport": http, "bytes": `"HTTP/1.1 4"`}
	expectText(t, table, "not_resp", vars, ErrClosed, connectFails(t, http))

	noise := impostor(t, randomBytes, true)
	// The first 10 bytes, each that is not UTF-8 as U+FFFD, shown as a key.
	vars = map[string]string{"hostport": noise, "bytes": "\"\ufffd\\0\ufffdz\\u{7}éQ\\u{1}\ufffd\""}
	expectText(t, table, "not_resp", vars, ErrClosed, connectFails(t, noise))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	huge := impostor(t, "$999999999999\r\n", true)
	err := connectFails(t, huge)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("the huge reply cost %d bytes", grew)
	}
	vars = map[string]string{"hostport": huge, "size": "999999999999", "limit": "67108864"}
	expectText(t, table, "reply_too_large", vars, ErrClosed, err)

	big := impostor(t, "*2\r\n$2000\r\n", true)
	vars = map[string]string{"hostport": big, "size": "2000", "limit": "1024"}
	expectText(t, table, "reply_too_large", vars, ErrClosed, connectFails(t, big, MaxReplyBytes(1024)))

	rude := impostor(t, "", false)
	expectText(t, table, "connection_closed", nil, ErrClosed, connectFails(t, rude))
}

// proclaimEnded: a Proclaim after the campaign's function returned.
func proclaimEnded(t *testing.T, table map[string]string) {
	ctx := context.Background()
	srv := startServer(t)
	store, err := Connect(ctx, srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lock, err := OpenLock(store, "inv")
	if err != nil {
		t.Fatal(err)
	}
	var kept *Leadership
	err = lock.Election("texts").Campaign(ctx, "a", func(ctx context.Context, lead *Leadership) error {
		kept = lead
		return nil
	})
	if err != nil || kept == nil {
		t.Fatalf("Campaign: %v", err)
	}
	vars := map[string]string{"lock": "inv", "key": `"texts"`}
	expectText(t, table, "proclaim_ended", vars, ErrInvalid, kept.Proclaim(ctx, "late"))
}
