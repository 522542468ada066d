package locks

import (
	"net"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultPort is the port holdline serve listens on unless told otherwise.
const DefaultPort = 7380

// address is where a server listens, and a URL's user and token.
type address struct {
	host string // without brackets
	port int
	// user: the URL's user name, "" when it named none (the user default).
	user  string
	token string
	// hasToken: the URL carried a token.
	hasToken bool
	// tls: a rediss:// URL.
	tls bool
}

// hostPort is host:port as a dialler takes it, an IPv6 host in brackets.
func (a address) hostPort() string {
	return net.JoinHostPort(a.host, strconv.Itoa(a.port))
}

// parseAddress reads host:port, host (port 7380), [ipv6]:port, [ipv6],
// redis://[[user]:token@]host[:port][/0], or the same with rediss://
// (TLS).
// Anything else is kind invalid, naming the address, before any
// connection is tried.
func parseAddress(text string) (address, *Error) {
	bad := func() (address, *Error) { return address{}, errBadAddress(text) }
	rest := text
	var a address
	url, isURL := cutPrefix(text, "redis://")
	if !isURL {
		url, isURL = cutPrefix(text, "rediss://")
		a.tls = isURL
	}
	if isURL {
		var ok bool
		if rest, a.user, a.token, a.hasToken, ok = urlParts(url); !ok {
			return bad()
		}
	} else if strings.Contains(text, "://") {
		return bad()
	}
	var ok bool
	if a.host, a.port, ok = splitHostPort(rest); !ok {
		return bad()
	}
	return a, nil
}

// urlParts splits a URL's authority (its "/0" database path dropped) from
// its user and token: "user:token@", or ":token@" as Redis writes it (the
// user default).
func urlParts(url string) (rest, user, token string, hasToken, ok bool) {
	if u, cut := cutSuffix(url, "/0"); cut {
		url = u
	} else {
		url = strings.TrimSuffix(url, "/")
	}
	if strings.ContainsAny(url, "/?#") {
		return "", "", "", false, false
	}
	at := strings.LastIndexByte(url, '@')
	if at < 0 {
		return url, "", "", false, true
	}
	userinfo, rest := url[:at], url[at+1:]
	// A bare user name would be a user without a password, which holdline
	// has not.
	user, token, found := strings.Cut(userinfo, ":")
	if !found || token == "" {
		return "", "", "", false, false
	}
	if token, ok = percentDecode(token); !ok {
		return "", "", "", false, false
	}
	if user, ok = percentDecode(user); !ok || user != "" && !isUserName(user) {
		return "", "", "", false, false
	}
	return rest, user, token, true, true
}

// isUserName: name is 1 to 64 ASCII letters, digits or "_-.:@".
func isUserName(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("_-.:@", b) >= 0) {
			return false
		}
	}
	return true
}

// splitHostPort reads host, host:port, [v6] or [v6]:port.
func splitHostPort(text string) (host string, port int, ok bool) {
	var portText string
	hasPort := false
	if inner, found := cutPrefix(text, "["); found {
		var after string
		if host, after, found = strings.Cut(inner, "]"); !found || !strings.Contains(host, ":") {
			return "", 0, false
		}
		if after != "" {
			if portText, hasPort = cutPrefix(after, ":"); !hasPort {
				return "", 0, false
			}
		}
	} else {
		host, portText, hasPort = strings.Cut(text, ":")
	}
	if host == "" {
		return "", 0, false
	}
	for i := 0; i < len(host); i++ {
		b := host[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("-._:%", b) >= 0) {
			return "", 0, false
		}
	}
	if !hasPort {
		return host, DefaultPort, true
	}
	for i := 0; i < len(portText); i++ {
		if portText[i] < '0' || portText[i] > '9' {
			return "", 0, false
		}
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// percentDecode undoes %XX escapes in a URL's token.
func percentDecode(text string) (string, bool) {
	if !strings.Contains(text, "%") {
		return text, true
	}
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] != '%' {
			b.WriteByte(text[i])
			continue
		}
		if i+2 >= len(text) {
			return "", false
		}
		n, err := strconv.ParseUint(text[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), utf8.ValidString(b.String())
}

// cutPrefix is strings.CutPrefix, which Go 1.19 lacks.
func cutPrefix(s, prefix string) (string, bool) {
	if !strings.HasPrefix(s, prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// cutSuffix is strings.CutSuffix, which Go 1.19 lacks.
func cutSuffix(s, suffix string) (string, bool) {
	if !strings.HasSuffix(s, suffix) {
		return s, false
	}
	return s[:len(s)-len(suffix)], true
}
