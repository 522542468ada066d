package locks

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Kind is what went wrong, as a caller branches on it.
type Kind int

// The five kinds of error.
const (
	// KindInvalid: a bad lock name, key, option or address; a hold inside a
	// hold of the same key; a token the server wants or refuses.
	KindInvalid Kind = iota + 1
	// KindInUse: the wait passed with the key still held.
	KindInUse
	// KindLost: the lease ran out, was revoked at its maxHold, or its
	// connection or store closed while it was held.
	KindLost
	// KindLimit: the line of waiters for the key is full (10,000).
	KindLimit
	// KindClosed: the store is closed, or the server cannot be reached.
	KindClosed
)

// String is the kind as the error texts spell it: "invalid", "in use",
// "lost", "limit" or "closed".
func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindInUse:
		return "in use"
	case KindLost:
		return "lost"
	case KindLimit:
		return "limit"
	case KindClosed:
		return "closed"
	}
	return "unknown"
}

// The sentinels that errors.Is matches an *Error against, one per kind.
var (
	ErrInvalid = errors.New("locks: invalid")
	ErrInUse   = errors.New("locks: in use")
	ErrLost    = errors.New("locks: lost")
	ErrLimit   = errors.New("locks: limit")
	ErrClosed  = errors.New("locks: closed")
)

// ErrNoPerm is what errors.Is matches an error against when the server
// refused a command naming a lock that the connection's user may not use
// (holdline serve --users): its reply NOPERM, kind KindInvalid (so
// errors.Is(err, ErrInvalid) holds too), and Error() the server's line as
// sent: NOPERM user alice may not use lock "payments". Retrying will not
// help; connecting as another user may.
var ErrNoPerm = errors.New("locks: no permission")

func (k Kind) sentinel() error {
	switch k {
	case KindInvalid:
		return ErrInvalid
	case KindInUse:
		return ErrInUse
	case KindLost:
		return ErrLost
	case KindLimit:
		return ErrLimit
	case KindClosed:
		return ErrClosed
	}
	return nil
}

// Error is an error of the store. Error() is the server's text byte for
// byte ("lock invoices: key \"9\": held past the hold's wait: in use"),
// and errors.Is matches it against the sentinel of its Kind.
type Error struct {
	// Kind says what went wrong.
	Kind Kind
	// Lock is the lock's name, "" for an error of the whole store.
	Lock string
	// Key is the key's text, uncut, "" when the error is about no key.
	Key string

	text string
	// cause is what the error wraps: a network error, or the function's
	// own error when a lease was lost while it ran.
	cause error
	// noPerm: the server's reply was NOPERM.
	noPerm bool
}

// Error answers the text.
func (e *Error) Error() string {
	if e.text == "" {
		return e.Kind.String()
	}
	return e.text
}

// Is reports whether target is the sentinel of e's kind, or ErrNoPerm for
// a NOPERM reply.
func (e *Error) Is(target error) bool {
	if e.noPerm && target == ErrNoPerm {
		return true
	}
	return target != nil && target == e.Kind.sentinel()
}

// Unwrap answers the network error behind a connection's failure, or the
// function's own error when a hold answers lost although its function
// returned an error too.
func (e *Error) Unwrap() error { return e.cause }

// withCause is a copy of e that wraps cause.
func (e *Error) withCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// shaped builds an error in the server's shape: "lock NAME: key "KEY":
// WHAT: KIND" ("store: " without a lock, no key part without a key), or
// for a loss "...: the lease was lost: WHAT".
func shaped(kind Kind, lock string, key *string, what string) *Error {
	var b strings.Builder
	if lock == "" {
		b.WriteString("store: ")
	} else {
		b.WriteString("lock " + lock + ": ")
	}
	e := &Error{Kind: kind, Lock: lock}
	if key != nil {
		e.Key = *key
		b.WriteString("key " + showKey(*key) + ": ")
	}
	if kind == KindLost {
		b.WriteString("the lease was lost: " + what)
	} else {
		b.WriteString(what + ": " + kind.String())
	}
	e.text = b.String()
	return e
}

// keyError is an error about one key of a lock.
func keyError(kind Kind, lock, key, what string) *Error {
	return shaped(kind, lock, &key, what)
}

// lockError is an error about a lock, no key.
func lockError(kind Kind, lock, what string) *Error {
	return shaped(kind, lock, nil, what)
}

// fromReply turns a server's error reply into an error. The first word of
// the five kinds is dropped and the core's text kept; any other reply
// (ERR, NOAUTH, ...) is kind invalid with the whole line, a NOPERM one
// matching ErrNoPerm too.
func fromReply(line, lock, key string) *Error {
	word, text, _ := strings.Cut(line, " ")
	kind, ok := kindOfWord[word]
	if !ok {
		kind, text = KindInvalid, line
	}
	return &Error{Kind: kind, Lock: lock, Key: key, text: text, noPerm: word == "NOPERM"}
}

// kindOfWord: the first word of a server's error reply, for each kind.
var kindOfWord = map[string]Kind{
	"INVALID": KindInvalid, "INUSE": KindInUse, "LOST": KindLost,
	"LIMIT": KindLimit, "CLOSED": KindClosed,
}

// The texts the client makes itself, worded as clients/texts.json words
// them for every client.

func errBadAddress(address string) *Error {
	return &Error{Kind: KindInvalid, text: "store: bad address " + showKey(address) +
		": expected host, host:port, [ipv6]:port or redis[s]://[[user]:token@]host[:port]: invalid"}
}

// errBadUser: a User option that is not 1 to 64 ASCII letters, digits or
// "_-.:@".
func errBadUser(user string) *Error {
	return &Error{Kind: KindInvalid, text: "store: bad user name " + showKey(user) +
		": expected 1 to 64 ASCII letters, digits or _-.:@: invalid"}
}

// errUserWithoutToken: a User option, and no token given anywhere.
func errUserWithoutToken(user string) *Error {
	return &Error{Kind: KindInvalid, text: "store: the user " + showKey(user) + " was given without a token: invalid"}
}

func errCannotConnect(hostport string, cause error) *Error {
	text := "store: cannot connect to " + hostport + " (" + reason(cause) + "): closed"
	return &Error{Kind: KindClosed, text: text, cause: cause}
}

func errConnectSilent(hostport string, timeout time.Duration) *Error {
	text := "store: the server at " + hostport + " answered nothing for " + durationText(timeout) + ": closed"
	return &Error{Kind: KindClosed, text: text, cause: os.ErrDeadlineExceeded}
}

// errNotHoldline: HELLO answered by another server, named (its name
// and version) or not ("").
func errNotHoldline(hostport, server string) *Error {
	if server == "" {
		return &Error{Kind: KindInvalid, text: "store: the server at " + hostport + " is not holdline: invalid"}
	}
	return &Error{Kind: KindInvalid, text: "store: the server at " + hostport + " is " + server + ", not holdline: invalid"}
}

// errNotRESP: the server sent bytes that are not RESP, head the first
// of them (10 at most are shown).
func errNotRESP(hostport string, head []byte) *Error {
	if len(head) > 10 {
		head = head[:10]
	}
	text := "store: the server at " + hostport + " answered with something that is not RESP (" + showKey(string(head)) + "): closed"
	return &Error{Kind: KindClosed, text: text, cause: errNotResp{head}}
}

// errReplyTooLarge: a reply's header announced size bytes, over limit.
func errReplyTooLarge(hostport string, size int64, limit int) *Error {
	text := fmt.Sprintf("store: the server at %s announced a reply of %d bytes, over the limit of %d: closed", hostport, size, limit)
	return &Error{Kind: KindClosed, text: text, cause: errTooLarge{size}}
}

// errProclaimEnded: Proclaim after the campaign's function returned.
func errProclaimEnded(lock, key string) *Error {
	return keyError(KindInvalid, lock, key, "proclaimed after the leadership ended")
}

// errTLSFailed: the TLS handshake failed, or the server ended the
// connection with a TLS alert before it answered HELLO.
func errTLSFailed(hostport string, cause error) *Error {
	text := "store: TLS with " + hostport + " failed (" + reason(cause) + "): closed"
	return &Error{Kind: KindClosed, text: text, cause: cause}
}

// isTLSAlert: err is the TLS alert the server ended the connection with.
func isTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

func errTokenMissing() *Error {
	return &Error{Kind: KindInvalid, text: "store: the server wants a token: invalid"}
}

func errTokenRefused() *Error {
	return &Error{Kind: KindInvalid, text: "store: the server refused the token: invalid"}
}

// errConnectRefused: HELLO answered with a refusal that is not about the
// token (the server's connection limit, say); line is the server's.
func errConnectRefused(hostport, line string) *Error {
	text := "store: the server at " + hostport + " refused the connection (" + line + "): closed"
	return &Error{Kind: KindClosed, text: text}
}

func errConnectionClosed(cause error) *Error {
	return &Error{Kind: KindClosed, text: "store: the connection to the server closed: closed", cause: cause}
}

func errConnectionClosedKey(lock, key string, cause error) *Error {
	e := keyError(KindClosed, lock, key, "the connection to the server closed")
	e.cause = cause
	return e
}

func errLostConnection(lock, key string, cause error) *Error {
	e := keyError(KindLost, lock, key, "its connection to the server closed")
	e.cause = cause
	return e
}

func errLostSilent(lock, key string, ttl time.Duration) *Error {
	return keyError(KindLost, lock, key, "the server answered nothing for its ttl ("+durationText(ttl)+")")
}

// errReattachFailed: a lease told it moved (a planned hand-over) could
// not re-attach at its new node before its deadline, or the new node had
// nothing under its secret.
func errReattachFailed(lock, key string) *Error {
	return keyError(KindLost, lock, key, "it could not follow its partition to another node")
}

func errWaitSilent(lock, key string, wait, grace time.Duration) *Error {
	what := "the server answered nothing for the hold's wait plus its ttl (" +
		durationText(wait) + " + " + durationText(grace) + ")"
	e := keyError(KindClosed, lock, key, what)
	e.cause = os.ErrDeadlineExceeded
	return e
}

// The core's texts for what the client finds before asking the server.

func errStoreClosed(lock, key string) *Error {
	return keyError(KindClosed, lock, key, "the store is closed")
}

func errLostStoreClosed(lock, key string) *Error {
	return keyError(KindLost, lock, key, "its store closed")
}

func errHoldInHold(lock, key string) *Error {
	return keyError(KindInvalid, lock, key, "hold inside a hold of the same key")
}

// reason is the platform's own words for a failed dial or read, without
// Go's "dial tcp ADDR:" preamble: "connection refused", "i/o timeout".
func reason(err error) string {
	var sys *os.SyscallError
	if errors.As(err, &sys) {
		return sys.Err.Error()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}
