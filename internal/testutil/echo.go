package testutil

import "strings"

// EvilMarker is a hostile field value: printable, without spaces or
// quotes (so that a line splitter hands it to a field check whole), and
// neither a token, a decimal nor hex. EvilMarkerEsc is the same with a
// terminal escape sequence. Errors about either must not quote them.
const (
	EvilMarker    = "EVIL<31m>MARK"
	EvilMarkerEsc = "EVIL\x1b[31mMARK"
)

// EvilParts are the pieces of the evil markers that an error must not
// contain, raw or %q-escaped.
func EvilParts() []string {
	return []string{"EVIL", "MARK", "<31m>", "\x1b", `\x1b`, `\u001b`, "[31m"}
}

// EchoesEvil reports the first part of an evil marker that msg contains.
func EchoesEvil(msg string) (string, bool) {
	for _, p := range EvilParts() {
		if strings.Contains(msg, p) {
			return p, true
		}
	}
	return "", false
}

// EchoRunLen is the length of the input runs EchoedRun looks for.
const EchoRunLen = 16

// EchoedRun is a fuzz property for text decoders: it returns a run of
// EchoRunLen bytes of in (among its first 64 KiB) that msg contains, when
// the run holds a byte that no value an error may legitimately show
// (an array name, a decimal, a hex digest, a key name) can hold: anything
// outside A-Z a-z 0-9 and _ . : / , = + - space. Such a run in an error
// is file content echoed. Texts in fixed (the format's own constants that
// a message may spell out, such as a line it expects) are removed from
// msg first.
func EchoedRun(msg string, in []byte, fixed ...string) (string, bool) {
	for _, f := range fixed {
		msg = strings.ReplaceAll(msg, f, "")
	}
	if len(in) > 64<<10 {
		in = in[:64<<10]
	}
	for i := 0; i+EchoRunLen <= len(in); i++ {
		w := in[i : i+EchoRunLen]
		if !hasHostileByte(w) {
			continue
		}
		if strings.Contains(msg, string(w)) {
			return string(w), true
		}
	}
	return "", false
}

func hasHostileByte(w []byte) bool {
	for _, c := range w {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_.:/,=+- ", c) >= 0:
		default:
			return true
		}
	}
	return false
}

// ContainsValue reports whether msg shows the value v (a decimal such as
// "301" or "0.41") as a value of its own: not inside a longer run of
// letters, digits and dots, such as a hex digest, a commit ID or another
// number, which may contain it by chance.
func ContainsValue(msg, v string) bool {
	alnum := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	digit := func(i int) bool { return i >= 0 && i < len(msg) && msg[i] >= '0' && msg[i] <= '9' }
	// A dot continues the run only between digits ("10.41"), not as a
	// full stop after the value.
	before := func(j int) bool { return j > 0 && (alnum(msg[j-1]) || msg[j-1] == '.' && digit(j-2)) }
	after := func(e int) bool { return e < len(msg) && (alnum(msg[e]) || msg[e] == '.' && digit(e+1)) }
	for i := 0; ; {
		j := strings.Index(msg[i:], v)
		if j < 0 {
			return false
		}
		j += i
		if !before(j) && !after(j+len(v)) {
			return true
		}
		i = j + 1
	}
}
