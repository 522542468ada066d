package locks

import (
	"fmt"
	"reflect"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// The longest key and lock name, in bytes.
const (
	maxKeyBytes  = 1024
	maxNameBytes = 128
)

// keyText is a key as the server takes it: a string as it is, an integer
// as its decimal text (so 9 and "9" are one key). Named types count by
// what they are made of (type InvoiceID int64 is an integer).
func keyText(lock string, key any) (string, *Error) {
	switch k := key.(type) {
	case string:
		return k, nil
	case int:
		return strconv.Itoa(k), nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case uint64:
		return strconv.FormatUint(k, 10), nil
	}
	v := reflect.ValueOf(key)
	switch v.Kind() {
	case reflect.String:
		return v.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10), nil
	}
	return "", lockError(KindInvalid, lock, fmt.Sprintf("a key is a string or an integer, not %T", key))
}

// checkKey applies the server's rule for keys: 1 to 1,024 bytes of UTF-8
// with no control characters. The texts are the server's.
func checkKey(lock, key string) *Error {
	bad := func(what string) *Error { return keyError(KindInvalid, lock, key, what) }
	if !utf8.ValidString(key) {
		return bad("the key is not UTF-8")
	}
	if key == "" {
		return bad("the key is empty")
	}
	if len(key) > maxKeyBytes {
		return bad("the key is longer than 1024 bytes")
	}
	for i := 0; i < len(key); i++ {
		if b := key[i]; b < 0x20 || b >= 0x7f {
			// Not plain printable ASCII: look at the characters (the C1
			// controls U+0080..U+009F are controls too).
			for _, r := range key[i:] {
				if unicode.IsControl(r) {
					return bad("the key holds a control character")
				}
			}
			break
		}
	}
	return nil
}

// nameRule is the rule for lock names as the error texts state it.
const nameRule = `a lock name is 1 to 128 ASCII letters, digits and "_-.:"`

// checkName applies the server's rule for lock names: 1 to 128 bytes of
// ASCII letters, digits and _ - . :. The text is the server's, the name
// quoted.
func checkName(name string) *Error {
	ok := name != "" && len(name) <= maxNameBytes
	for i := 0; ok && i < len(name); i++ {
		b := name[i]
		ok = b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
			b == '_' || b == '-' || b == '.' || b == ':'
	}
	if ok {
		return nil
	}
	e := lockError(KindInvalid, quote(name), nameRule)
	e.Lock = name
	return e
}
