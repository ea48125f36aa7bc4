package pickle

import (
	"errors"
	"unicode/utf8"
)

// unquotePy decodes the argument of the protocol-0 STRING opcode: a
// Python 2 str literal in single or double quotes with backslash escapes
// (\\ \' \" \a \b \f \n \r \t \v \xHH, octal \ooo).
func unquotePy(s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != s[len(s)-1] || s[0] != '\'' && s[0] != '"' {
		return nil, errors.New("not a quoted literal")
	}
	s = s[1 : len(s)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return nil, errors.New("trailing backslash")
		}
		switch c = s[i]; c {
		case '\\', '\'', '"':
			out = append(out, c)
		case 'a':
			out = append(out, 7)
		case 'b':
			out = append(out, 8)
		case 'f':
			out = append(out, 12)
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, 11)
		case 'x':
			if i+2 >= len(s) {
				return nil, errors.New("short \\x escape")
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return nil, errors.New("bad \\x escape")
			}
			out = append(out, hi<<4|lo)
			i += 2
		default:
			if c < '0' || c > '7' {
				// Python keeps unknown escapes as they are.
				out = append(out, '\\', c)
				continue
			}
			v := int(c - '0')
			for n := 1; n < 3 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; n++ {
				i++
				v = v*8 + int(s[i]-'0')
			}
			out = append(out, byte(v))
		}
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// rawUnicodeEscape decodes the argument of the protocol-0 UNICODE opcode:
// Latin-1 bytes where \uXXXX and \UXXXXXXXX stand for code points.
func rawUnicodeEscape(s []byte) (string, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') {
			n := 4
			if s[i+1] == 'U' {
				n = 8
			}
			if i+2+n > len(s) {
				return "", errors.New("short \\u escape")
			}
			var r rune
			for _, h := range s[i+2 : i+2+n] {
				d, ok := unhex(h)
				if !ok {
					return "", errors.New("bad \\u escape")
				}
				r = r<<4 | rune(d)
			}
			if r > utf8.MaxRune || r < 0 {
				return "", errors.New("code point out of range")
			}
			out = utf8.AppendRune(out, r)
			i += 1 + n
			continue
		}
		out = utf8.AppendRune(out, rune(c))
	}
	return string(out), nil
}
