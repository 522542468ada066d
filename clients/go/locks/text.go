package locks

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// keyShownChars is how many characters of a key an error text shows; a
// longer key is cut, with "..." inside its quotes.
const keyShownChars = 64

// showKey writes a key as the server's texts show it: quoted and escaped
// as Rust's Debug writes a string, its first 64 characters only.
func showKey(key string) string {
	key = lossy(key)
	cut := false
	if n := 0; utf8.RuneCountInString(key) > keyShownChars {
		for i := range key {
			if n == keyShownChars {
				key, cut = key[:i], true
				break
			}
			n++
		}
	}
	shown := quote(key)
	if cut {
		return shown[:len(shown)-1] + `..."`
	}
	return shown
}

// quote writes text whole as Rust's Debug writes a string (lock names in
// errors are shown this way).
func quote(text string) string {
	var b strings.Builder
	b.Grow(len(text) + 2)
	b.WriteByte('"')
	for _, r := range lossy(text) {
		writeEscaped(&b, r)
	}
	b.WriteByte('"')
	return b.String()
}

// writeEscaped writes one character as Rust's string Debug does: the
// usual backslash escapes, \u{..} (lowercase hex) for characters that do
// not print or that extend the grapheme before them, and the rest as is.
func writeEscaped(b *strings.Builder, r rune) {
	switch r {
	case '"':
		b.WriteString(`\"`)
	case '\\':
		b.WriteString(`\\`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case 0:
		b.WriteString(`\0`)
	default:
		if r != ' ' && (!printable(r) || graphemeExtend(r)) {
			b.WriteString(`\u{`)
			b.WriteString(strconv.FormatInt(int64(r), 16))
			b.WriteByte('}')
		} else {
			b.WriteRune(r)
		}
	}
}

// printable: Rust counts a character as printable unless it is a control,
// format, surrogate, private-use, unassigned or separator character (the
// space excepted, which the caller handles).
func printable(r rune) bool {
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zs, unicode.Zl, unicode.Zp) {
		return false
	}
	// Unassigned: in no general category at all.
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// graphemeExtend is Unicode's Grapheme_Extend property: Me, Mn and
// Other_Grapheme_Extend.
func graphemeExtend(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Other_Grapheme_Extend)
}

// lossy makes text valid UTF-8 as Rust's String::from_utf8_lossy does (the
// server reads names and keys that way): each broken sequence becomes one
// U+FFFD, a broken sequence being the longest start of a valid one.
func lossy(text string) string {
	if utf8.ValidString(text) {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if r != utf8.RuneError || size > 1 {
			b.WriteString(text[i : i+size])
			i += size
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += brokenLength(text[i:])
	}
	return b.String()
}

// brokenLength is how many bytes at the start of text (which does not
// start with a valid character) form one broken sequence: the lead byte
// and the continuation bytes that could still have made it valid.
func brokenLength(text string) int {
	lead := text[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the range of the first continuation byte
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		need = 2
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead == 0xF4:
		need, hi = 3, 0x8F
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(text); n++ {
		c := text[n]
		if n == 1 && (c < lo || c > hi) || n > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
	}
	return n
}

// durationText writes a duration as the server's texts do: the shortest
// exact form of its whole milliseconds (300ms, 2s, 1m).
func durationText(d time.Duration) string {
	ms := millis(d)
	switch {
	case ms != 0 && ms%60_000 == 0:
		return strconv.FormatInt(ms/60_000, 10) + "m"
	case ms%1000 == 0:
		return strconv.FormatInt(ms/1000, 10) + "s"
	default:
		return strconv.FormatInt(ms, 10) + "ms"
	}
}

// millis is d in whole milliseconds, rounded up, so that a positive
// duration never goes over the wire as zero; a negative one is zero.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
