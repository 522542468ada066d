package locks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Keys are shown as Rust's {:?} shows them; the expectations were written
// by Rust itself (rustc 1.95), so that every client shows one key alike.
// (Go 1.19 knows Unicode 13: a character assigned later, such as a newer
// emoji, is shown escaped here and as it is by Rust.)
func TestKeysAreShownAsTheServerShowsThem(t *testing.T) {
	cases := []struct{ key, shown string }{
		{"9", `"9"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"tab\there\nnl\r\x00", `"tab\there\nnl\r\0"`},
		{"it's", `"it's"`},
		{"é", `"é"`},
		{"e\u0301", `"e\u{301}"`},
		{"\u0301x", `"\u{301}x"`},
		{"\u200bzw", `"\u{200b}zw"`},
		{"\u007f\u0085", `"\u{7f}\u{85}"`},
		{"\u00a0nbsp", `"\u{a0}nbsp"`},
		{"\u2028\u2029", `"\u{2028}\u{2029}"`},
		{"\ue000pua", `"\u{e000}pua"`},
		{"\u0378unassigned", `"\u{378}unassigned"`},
		{"日本語", `"日本語"`},
		{"😀", `"😀"`},
		{"\U0001f3fb", "\"\U0001f3fb\""},
		{"\ufeffbom", `"\u{feff}bom"`},
		{"\u3000ideo", `"\u{3000}ideo"`},
		{"\u09bebengali", `"\u{9be}bengali"`},
		{"\u20dd", `"\u{20dd}"`},
		{"\U0010ffff", `"\u{10ffff}"`},
		{"\U000e0001", `"\u{e0001}"`},
		{"\x1b[0m", `"\u{1b}[0m"`},
		{"a b", `"a b"`},
		{strings.Repeat("x", 64), `"` + strings.Repeat("x", 64) + `"`},
		{strings.Repeat("y", 65), `"` + strings.Repeat("y", 64) + `..."`},
		{strings.Repeat("é", 70), `"` + strings.Repeat("é", 64) + `..."`},
	}
	for _, c := range cases {
		if got := showKey(c.key); got != c.shown {
			t.Errorf("showKey(%+q) = %s, want %s", c.key, got, c.shown)
		}
	}
}

// Bytes that are not UTF-8 are read as Rust's from_utf8_lossy reads them
// (the server does so before it shows a key).
func TestBrokenUTF8IsReadAsRustReadsIt(t *testing.T) {
	cases := []struct{ in, out string }{
		{"\xff", "\ufffd"},
		{"a\xe2\x82", "a\ufffd"},
		{"\xe2\x82A", "\ufffdA"},
		{"\xf0\x9f\x98", "\ufffd"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"\xe0\x80\xaf", "\ufffd\ufffd\ufffd"},
	}
	for _, c := range cases {
		if got := lossy(c.in); got != c.out {
			t.Errorf("lossy(%q) = %q, want %q", c.in, got, c.out)
		}
	}
}

func TestDurationsAreWrittenAsTheServerWritesThem(t *testing.T) {
	cases := map[time.Duration]string{
		300 * time.Millisecond: "300ms", 2 * time.Second: "2s", time.Minute: "1m",
		90 * time.Second: "90s", 1500 * time.Millisecond: "1500ms", 0: "0s",
		1500 * time.Microsecond: "2ms", 2 * time.Hour: "120m",
	}
	for d, want := range cases {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestAddressForms(t *testing.T) {
	good := []struct {
		in, hostPort, token string
		tls                 bool
	}{
		{"127.0.0.1:27400", "127.0.0.1:27400", "", false},
		{"127.0.0.1", "127.0.0.1:7380", "", false},
		{"localhost", "localhost:7380", "", false},
		{"[::1]:9", "[::1]:9", "", false},
		{"[::1]", "[::1]:7380", "", false},
		{"redis://127.0.0.1:27400", "127.0.0.1:27400", "", false},
		{"redis://h", "h:7380", "", false},
		{"redis://:s3cret@h:1/0", "h:1", "s3cret", false},
		{"redis://default:s3cret@[::1]", "[::1]:7380", "s3cret", false},
		{"redis://:a%40b@h", "h:7380", "a@b", false},
		{"rediss://h", "h:7380", "", true},
		{"rediss://:s3cret@[::1]:9/0", "[::1]:9", "s3cret", true},
	}
	for _, g := range good {
		a, err := parseAddress(g.in)
		if err != nil {
			t.Errorf("%s: %v", g.in, err)
			continue
		}
		if a.hostPort() != g.hostPort || a.token != g.token || a.hasToken != (g.token != "") || a.tls != g.tls {
			t.Errorf("%s: %+v", g.in, a)
		}
	}
	bad := []string{
		"", ":7380", "h:", "h:0", "h:65536", "h:x", "h:1:2", "[::1", "[::1]x", "[h]:1",
		"rediss://", "redis:/h", "http://h", "redis://", "redis://h/1", "redis://user@h",
		"redis://:@h", "h p", "h\n", "redis://:%4@h", "redis://user:@h", "redis://us er:t@h",
		"redis://us%20er:t@h", "redis://é:t@h", "redis://a%C3%A9:t@h", "redis://" + strings.Repeat("u", 65) + ":t@h",
	}
	for _, b := range bad {
		_, err := parseAddress(b)
		want := "store: bad address " + showKey(b) +
			": expected host, host:port, [ipv6]:port or redis[s]://[[user]:token@]host[:port]: invalid"
		if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", b, err)
		}
	}
}

type invoiceID int64
type sku string
type small uint8

func TestKeysAreStringsOrIntegersOfAnyType(t *testing.T) {
	cases := []struct {
		key  any
		text string
	}{
		{"9", "9"}, {9, "9"}, {int8(-128), "-128"}, {int16(7), "7"}, {int32(-1), "-1"},
		{int64(-9223372036854775808), "-9223372036854775808"}, {uint(3), "3"}, {uint8(255), "255"},
		{uint16(1), "1"}, {uint32(2), "2"}, {uint64(18446744073709551615), "18446744073709551615"},
		{uintptr(5), "5"}, {invoiceID(42), "42"}, {sku("a-1"), "a-1"}, {small(7), "7"},
	}
	for _, c := range cases {
		got, err := keyText("l", c.key)
		if err != nil || got != c.text {
			t.Errorf("keyText(%T %v) = %q, %v", c.key, c.key, got, err)
		}
	}
	for _, k := range []any{1.5, []byte("x"), nil, struct{}{}, true} {
		_, err := keyText("inv", k)
		want := fmt.Sprintf("lock inv: a key is a string or an integer, not %T: invalid", k)
		if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
			t.Errorf("keyText(%T) = %v", k, err)
		}
	}
}

func TestKeysAndNamesAreCheckedWithTheServersTexts(t *testing.T) {
	for _, ok := range []string{"a", strings.Repeat("é", 512), strings.Repeat("a", 1024)} {
		if err := checkKey("l", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	cases := map[string]string{
		"":                         `lock inv: key "": the key is empty: invalid`,
		strings.Repeat("a", 1025):  `lock inv: key "` + strings.Repeat("a", 64) + `...": the key is longer than 1024 bytes: invalid`,
		"a\nb":                     `lock inv: key "a\nb": the key holds a control character: invalid`,
		"x\u0085":                  `lock inv: key "x\u{85}": the key holds a control character: invalid`,
		"\u007f":                   `lock inv: key "\u{7f}": the key holds a control character: invalid`,
		"a\xffb":                   "lock inv: key \"a\ufffdb\": the key is not UTF-8: invalid",
		"tab\t":                    `lock inv: key "tab\t": the key holds a control character: invalid`,
		strings.Repeat("é", 513):   `lock inv: key "` + strings.Repeat("é", 64) + `...": the key is longer than 1024 bytes: invalid`,
		"ok\u200b\u0301\u00a0keys": "",
	}
	for key, want := range cases {
		err := checkKey("inv", key)
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", key, err)
			}
			continue
		}
		if err == nil || err.Error() != want || err.Kind != KindInvalid || err.Key != key {
			t.Errorf("%q: %v", key, err)
		}
	}
	for _, ok := range []string{"invoices", "a-b_c.d:e9", strings.Repeat("n", 128)} {
		if err := checkName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "sp ace", "slash/", "é", strings.Repeat("n", 129)} {
		want := "lock " + quote(bad) + `: a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid`
		if err := checkName(bad); err == nil || err.Error() != want {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := checkName("a b"); err.Error() != `lock "a b": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid` {
		t.Error(err)
	}
}

func TestErrorsMatchTheirSentinelAndKeepTheServersText(t *testing.T) {
	lines := map[string]error{
		`INUSE lock invoices: key "9": held past the hold's wait: in use`:                ErrInUse,
		`LOST lock invoices: key "m": the lease was lost: it was revoked at its maxHold`: ErrLost,
		`LIMIT lock invoices: key "7": 10000 waiters already stand in line: limit`:       ErrLimit,
		`INVALID lock invoices: key "7": hold inside a hold of the same key: invalid`:    ErrInvalid,
		`CLOSED lock invoices: key "7": the store is closed: closed`:                     ErrClosed,
	}
	sentinels := []error{ErrInUse, ErrLost, ErrLimit, ErrInvalid, ErrClosed}
	for line, sentinel := range lines {
		err := error(fromReply(line, "invoices", "9"))
		_, text, _ := strings.Cut(line, " ")
		if err.Error() != text {
			t.Errorf("%q: %q", line, err.Error())
		}
		for _, s := range sentinels {
			if errors.Is(err, s) != (s == sentinel) {
				t.Errorf("%q: errors.Is(%v) = %v", line, s, !(s == sentinel))
			}
		}
		var e *Error
		wrapped := fmt.Errorf("charging: %w", err)
		if !errors.As(wrapped, &e) || e.Kind.sentinel() != sentinel || !errors.Is(wrapped, sentinel) {
			t.Errorf("%q: errors.As through a wrap: %+v", line, e)
		}
	}
	other := fromReply("ERR unknown command 'NOPE'", "l", "k")
	if other.Kind != KindInvalid || other.Error() != "ERR unknown command 'NOPE'" {
		t.Errorf("%+v", other)
	}
	kinds := map[Kind]string{KindInvalid: "invalid", KindInUse: "in use", KindLost: "lost", KindLimit: "limit", KindClosed: "closed"}
	for k, s := range kinds {
		if k.String() != s {
			t.Errorf("%d: %q", k, k.String())
		}
	}
	// The function's own error stays reachable through a loss.
	mine := errors.New("mine")
	lost := errLostSilent("l", "k", time.Second).withCause(mine)
	if !errors.Is(lost, mine) || !errors.Is(lost, ErrLost) || errors.Is(lost, ErrClosed) {
		t.Error("a loss wrapping the function's error")
	}
}

func TestTheReaderReadsEveryRESPTypeAndPushesBetweenReplies(t *testing.T) {
	wire := "+OK\r\n-INUSE lock l: key \"k\": held past the hold's wait: in use\r\n:-42\r\n" +
		"$5\r\nhello\r\n$-1\r\n*2\r\n:1\r\n:2\r\n>3\r\n$4\r\nlost\r\n:7\r\n$4\r\ngone\r\n" +
		"%1\r\n+a\r\n#t\r\n~1\r\n,1.5\r\n_\r\n(12345678901234567890\r\n!3\r\nERR\r\n" +
		"=8\r\ntxt:abcd\r\n|1\r\n+ttl\r\n:3\r\n+after\r\n*-1\r\n"
	r := bufio.NewReaderSize(strings.NewReader(wire), 16)
	var kinds []string
	for {
		v, err := readValue(r, DefaultMaxReplyBytes)
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatal(err)
			}
			break
		}
		kinds = append(kinds, fmt.Sprintf("%c%s%d%v", v.kind, v.text, v.num, v.null))
		if v.kind == '>' && (len(v.items) != 3 || v.items[0].text != "lost" || v.items[1].num != 7) {
			t.Errorf("push: %+v", v)
		}
	}
	want := []string{"+OK0false", "-INUSE lock l: key \"k\": held past the hold's wait: in use0false", ":-42false",
		"$hello0false", "$0true", "*0false", ">0false", "%0false", "~0false", "_0true", "(123456789012345678900false",
		"!ERR0false", "=abcd0false", "+after0false", "*0true"}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Errorf("got  %q\nwant %q", kinds, want)
	}
	for _, broken := range []string{"?x\r\n", "$3\r\nabcde\r\n", ":x\r\n", "*1\r\n>0\r\n", "$-5\r\n", "+no cr\n", "*2\r\n:1\r\n"} {
		if _, err := readValue(bufio.NewReader(strings.NewReader(broken)), DefaultMaxReplyBytes); err == nil {
			t.Errorf("%q read without error", broken)
		}
	}
	if got := string(appendCommand(nil, "HOLD", "l", "é")); got != "*3\r\n$4\r\nHOLD\r\n$1\r\nl\r\n$2\r\né\r\n" {
		t.Errorf("%q", got)
	}
}

// fakeClockLease is a lease whose clock the test sets (ns), granted to a
// HOLD sent at 0 and read at *now.
func fakeClockLease(ttl time.Duration, now *int64, onClockLoss func()) *leaseState {
	s := newLeaseState("stall", "k", ttl, onClockLoss)
	s.clock = func() int64 { return *now }
	s.granted(1, 5, 0)
	return s
}

// A lease is judged by the clock at every look: after a stall past its
// deadline, the first look answers lost, before its timer or any reply.
func TestTheFirstLookAfterAStallReadsTheClock(t *testing.T) {
	now := int64(0)
	closed := 0
	s := fakeClockLease(2*time.Second, &now, func() { closed++ })
	defer s.end()
	now = int64(1790 * time.Millisecond) // before s + ttl - margin (1.8s)
	if s.check() != nil {
		t.Fatal("lost before the deadline")
	}
	now = int64(1800 * time.Millisecond)
	lost := s.check()
	want := `lock stall: key "k": the lease was lost: the server answered nothing for its ttl (2s)`
	if lost == nil || lost.Error() != want || closed != 1 {
		t.Fatalf("%v, connection closed %d times", lost, closed)
	}
	// A reply arriving after the stall does not make it held again.
	s.confirm(now)
	if s.check() != lost {
		t.Fatal("a late reply revived the lease")
	}
	ctx := newHoldCtx(context.Background(), &heldKey{state: s})
	if ctx.Err() != context.Canceled || Cause(ctx) != lost {
		t.Fatalf("%v %v", ctx.Err(), Cause(ctx))
	}
}

// A reply after a stall is judged before it moves the deadline on.
func TestAReplyAfterAStallDoesNotReviveTheLease(t *testing.T) {
	now := int64(0)
	s := fakeClockLease(time.Second, &now, func() {})
	defer s.end()
	now = int64(5 * time.Second)
	s.confirm(int64(4 * time.Second)) // a PING sent after the stall, answered
	if s.check() == nil {
		t.Fatal("held after a stall past its deadline")
	}
}

// The deadline is a chain: a reply arriving before it moves it to its
// command's send time + ttl - margin, never back.
func TestRepliesBeforeTheDeadlineMoveItOn(t *testing.T) {
	now := int64(0)
	s := fakeClockLease(time.Second, &now, func() {})
	defer s.end()
	now = int64(800 * time.Millisecond)
	s.confirm(int64(600 * time.Millisecond)) // deadline 1.5s
	s.confirm(int64(100 * time.Millisecond)) // an older command: no move back
	now = int64(1400 * time.Millisecond)
	if s.check() != nil {
		t.Fatal("lost although a reply moved the deadline to 1.5s")
	}
	now = int64(1500 * time.Millisecond)
	if s.check() == nil {
		t.Fatal("held past its deadline")
	}
}

// A grant read past its first deadline has none until a RENEW confirms
// it: the replies to commands sent while its HOLD waited (PINGs, which do
// not look at the lease) count for nothing, and the lease then runs from
// the RENEW's send time.
func TestALateGrantStartsFromTheRenewThatConfirmsIt(t *testing.T) {
	now := int64(5 * time.Second) // the HOLD was sent at 0, ttl 1s
	s := newLeaseState("wait", "k", time.Second, func() {})
	s.clock = func() int64 { return now }
	s.granted(1, 5, 0)
	defer s.end()
	if !s.isLate() || s.isStarted() || s.check() != nil {
		t.Fatalf("late %v, started %v, lost %v", s.isLate(), s.isStarted(), s.check())
	}
	s.confirm(int64(4800 * time.Millisecond)) // a PING sent during the wait
	if s.isStarted() {
		t.Fatal("a PING's answer started a late grant")
	}
	now = int64(5100 * time.Millisecond)
	s.confirmedBy(int64(5 * time.Second)) // RENEW sent at 5s, answered OK
	if s.check() != nil {
		t.Fatal("lost at its first look after the RENEW")
	}
	now = int64(5900 * time.Millisecond) // 5s + 1s - 100ms
	if s.check() == nil {
		t.Fatal("held past the RENEW's deadline")
	}
}
