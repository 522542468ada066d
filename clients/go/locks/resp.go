package locks

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// value is one RESP frame as read: only what holdline's server sends is
// used, but every RESP2 and RESP3 type is read, so that nothing a server
// adds can put the stream out of step.
type value struct {
	// kind is the frame's type byte: '+' simple, '-' error, ':' integer,
	// '$' bulk, '*' array, '%' map, '~' set, '>' push, '_' null, '#'
	// boolean, ',' double, '(' big number, '!' bulk error, '=' verbatim.
	kind byte
	// text: a string's or an error's text; a double or big number as written.
	text string
	// num: an integer; a boolean as 1 or 0.
	num int64
	// items: an aggregate's elements (a map's keys and values in turn).
	items []value
	// null: a null bulk string, array or RESP3 null.
	null bool
}

func (v value) isError() bool { return v.kind == '-' || v.kind == '!' }

// errProtocol: a frame the reader cannot make sense of; the stream cannot
// be trusted past it.
type errProtocol struct{ what string }

func (e errProtocol) Error() string { return "unreadable reply from the server: " + e.what }

// errNotResp: bytes that are not RESP; head holds the first of them (up
// to 10).
type errNotResp struct{ head []byte }

func (e errNotResp) Error() string { return fmt.Sprintf("not RESP: %q", e.head) }

// errTooLarge: a header announcing size bytes, over the reply limit.
type errTooLarge struct{ size int64 }

func (e errTooLarge) Error() string { return fmt.Sprintf("a reply of %d bytes", e.size) }

// DefaultMaxReplyBytes is the largest reply a connection takes unless
// MaxReplyBytes says otherwise: 64 MiB.
const DefaultMaxReplyBytes = 64 << 20

// maxDepth bounds how deep aggregates may nest.
const maxDepth = 32

// readValue reads one whole frame, refusing one whose header announces
// more than limit bytes (a string's length; an aggregate's count times 3,
// the fewest its elements take) before reading any of it, and bytes that
// are not RESP as soon as their first is seen. A push ('>') may come
// between any two frames; a push inside an aggregate is a protocol error.
func readValue(r *bufio.Reader, limit int) (value, error) {
	return readNested(r, 0, limit)
}

func readNested(r *bufio.Reader, depth, limit int) (value, error) {
	if depth > maxDepth {
		return value{}, errProtocol{"frames nested too deep"}
	}
	kind, err := r.ReadByte()
	if err != nil {
		return value{}, err
	}
	if !strings.ContainsRune("+-:$*_,#!=(%~>|", rune(kind)) {
		// Told at once, from what is at hand: no line end is waited for.
		_ = r.UnreadByte()
		head, _ := r.Peek(min(10, r.Buffered()))
		return value{}, errNotResp{append([]byte(nil), head...)}
	}
	line, err := readLine(r, limit)
	if err != nil {
		return value{}, err
	}
	v := value{kind: kind}
	switch kind {
	case '+', '-', ',', '(':
		v.text = line
	case ':':
		v.num, err = strconv.ParseInt(line, 10, 64)
	case '#':
		v.num, err = boolean(line)
	case '_':
		v.null = true
	case '$', '!', '=':
		err = readBulk(r, line, limit, &v)
	case '*', '~', '>', '%':
		err = readItems(r, line, depth, limit, &v)
	case '|':
		// Attributes describe the frame after them; holdline needs none.
		attrs := value{kind: kind}
		if err = readItems(r, line, depth, limit, &attrs); err == nil {
			return readNested(r, depth, limit)
		}
	}
	if err != nil {
		return value{}, garbled(protocolOr(err), kind, line)
	}
	return v, nil
}

// garbled: a protocol error in the frame that started kind, line is
// reported as bytes that are not RESP, quoting them.
func garbled(err error, kind byte, line string) error {
	var p errProtocol
	if !errors.As(err, &p) {
		return err
	}
	head := append([]byte{kind}, line...)
	if len(head) > 10 {
		head = head[:10]
	}
	return errNotResp{head}
}

// protocolOr keeps I/O errors as they are and names anything else a
// protocol error (a number that does not parse, say).
func protocolOr(err error) error {
	var p errProtocol
	if errors.As(err, &p) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if _, ok := err.(*strconv.NumError); ok {
		return errProtocol{err.Error()}
	}
	return err
}

func boolean(line string) (int64, error) {
	switch line {
	case "t":
		return 1, nil
	case "f":
		return 0, nil
	}
	return 0, errProtocol{fmt.Sprintf("bad boolean %q", line)}
}

// readBulk reads the body of a bulk string, bulk error or verbatim string
// whose length line was line.
func readBulk(r *bufio.Reader, line string, limit int, v *value) error {
	n, err := length(line, 1, limit)
	if err != nil {
		return err
	}
	if n < 0 {
		v.null = true
		return nil
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return unexpected(err)
	}
	if body[n] != '\r' || body[n+1] != '\n' {
		return errProtocol{"a bulk string without its CRLF"}
	}
	v.text = string(body[:n])
	if v.kind == '=' {
		// A verbatim string starts with its format: "txt:".
		if len(v.text) < 4 || v.text[3] != ':' {
			return errProtocol{"a verbatim string without its format"}
		}
		v.text = v.text[4:]
	}
	return nil
}

// readItems reads an aggregate's elements; a map has two per entry.
func readItems(r *bufio.Reader, line string, depth, limit int, v *value) error {
	per := int64(3)
	if v.kind == '%' || v.kind == '|' {
		per = 6
	}
	n, err := length(line, per, limit)
	if err != nil {
		return err
	}
	if n < 0 {
		v.null = true
		return nil
	}
	if v.kind == '%' || v.kind == '|' {
		n *= 2
	}
	v.items = make([]value, 0, min(n, 64))
	for i := 0; i < n; i++ {
		item, err := readNested(r, depth+1, limit)
		if err != nil {
			return unexpected(err)
		}
		if item.kind == '>' {
			return errProtocol{"a push inside an aggregate"}
		}
		v.items = append(v.items, item)
	}
	return nil
}

// length reads a length line: a count of items that take per bytes each
// at least, or -1 for a null; errTooLarge when they pass limit bytes.
func length(line string, per int64, limit int) (int, error) {
	n, err := strconv.ParseInt(line, 10, 64)
	if err != nil || n < -1 {
		return 0, errProtocol{fmt.Sprintf("bad length %q", line)}
	}
	if n > int64(limit)/per {
		size := n * per
		if n > math.MaxInt64/per {
			size = math.MaxInt64
		}
		return 0, errTooLarge{size}
	}
	return int(n), nil
}

// readLine reads up to CRLF, up to limit bytes, and drops the CRLF.
func readLine(r *bufio.Reader, limit int) (string, error) {
	chunk, err := r.ReadSlice('\n')
	if err == nil {
		if len(chunk) < 2 || chunk[len(chunk)-2] != '\r' {
			return "", errProtocol{"a line without its CR"}
		}
		return string(chunk[:len(chunk)-2]), nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return "", unexpected(err)
	}
	long := append([]byte(nil), chunk...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(long) > limit {
			return "", errTooLarge{int64(len(long))}
		}
		chunk, err = r.ReadSlice('\n')
		long = append(long, chunk...)
	}
	if err != nil {
		return "", unexpected(err)
	}
	if len(long) < 2 || long[len(long)-2] != '\r' {
		return "", errProtocol{"a line without its CR"}
	}
	return string(long[:len(long)-2]), nil
}

// unexpected: an end of stream inside a frame is not a clean end.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// appendCommand appends a command as a RESP array of bulk strings.
func appendCommand(buf []byte, args ...string) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}
