package jsonerr

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

type inner struct {
	N int `json:"n"`
}

type doc struct {
	Name  string           `json:"name"`
	Inner inner            `json:"inner"`
	Map   map[string]inner `json:"map"`
	Str   int              `json:"str,string"`
	Hex   hexBytes         `json:"hex"`
}

// hexBytes is an Unmarshaler whose error quotes the input, as
// encoding/hex's does.
type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

// TestDescribeNeverEchoes: the evil marker as a key, as a value of the
// wrong type, as the offending syntax byte, inside a number literal and
// under ",string" and an Unmarshaler: the description names the kind of
// failure and the offset (or the key's length), never the input.
func TestDescribeNeverEchoes(t *testing.T) {
	const long = "123456789012345678901234567890" // a number too big for int: encoding/json quotes it
	// A wrong type's offset is encoding/json's: just past a literal, just
	// past the '[' or '{' of an array or object.
	for _, evil := range []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)} {
		for _, c := range []struct {
			name, in, want string
			offset         int64
			strict         bool
		}{
			{"unknown key", `{"name":"a","` + evil + `":1}`, "unknown key (", -1, true},
			{"wrong type", `{"name":["` + evil + `"]}`, "wrong JSON type for name at byte ", 9, false},
			{"nested wrong type", `{"inner":{"n":"` + evil + `"}}`, "wrong JSON type for inner.n at byte ", 16 + int64(len(evil)), false},
			{"wrong type under a map key", `{"map":{"` + evil + `":{"n":"x"}}}`, "wrong JSON type for map.n at byte ", 19 + int64(len(evil)), false},
			{"number literal", `{"inner":{"n":` + long + `}}`, "wrong JSON type for inner.n at byte ", 44, false},
			{"syntax byte", `{"name":` + evil + `}`, "malformed JSON at byte 8", 8, false},
			{"syntax byte in a key", `{` + evil + `:1}`, "malformed JSON at byte 1", 1, false},
			{"truncated", `{"name":"` + evil, "truncated JSON", -1, false},
			{",string", `{"str":"` + evil + `"}`, "invalid JSON value", -1, false},
			{"unmarshaler", `{"hex":"` + evil + `"}`, "invalid JSON value", -1, false},
		} {
			var d doc
			dec := json.NewDecoder(strings.NewReader(c.in))
			if c.strict {
				dec.DisallowUnknownFields()
			}
			raw := dec.Decode(&d)
			if raw == nil {
				t.Fatalf("%s: decoded", c.name)
			}
			err := Describe(raw)
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: %q echoes %q", c.name, msg, p)
			}
			if strings.Contains(msg, long[:8]) {
				t.Errorf("%s: %q echoes the number", c.name, msg)
			}
			if !strings.HasPrefix(msg, c.want) {
				t.Errorf("%s: %q, want it to start with %q", c.name, msg, c.want)
			}
			var je *Error
			if !errors.As(err, &je) {
				t.Fatalf("%s: %T is not *Error", c.name, err)
			}
			if je.Offset != c.offset {
				t.Errorf("%s: offset %d, want %d (%s)", c.name, je.Offset, c.offset, msg)
			}
			if !errors.Is(err, raw) {
				t.Errorf("%s: errors.Is does not reach the original error", c.name)
			}
			// json.Unmarshal (syntax checked before types) never echoes either.
			if uerr := json.Unmarshal([]byte(c.in), &d); uerr != nil {
				if p, ok := testutil.EchoesEvil(Describe(uerr).Error()); ok {
					t.Errorf("%s: Unmarshal: %q echoes %q", c.name, Describe(uerr), p)
				}
			}
		}
	}
}

// TestDescribeKinds: errors.Is/As reach the original error; an offset is
// shifted by DescribeAt's base; an *Error is not described twice.
func TestDescribeKinds(t *testing.T) {
	if Describe(nil) != nil {
		t.Fatal("Describe(nil) is not nil")
	}
	var v []int
	err := Describe(json.Unmarshal([]byte(`[1,2`), &v))
	if err.Error() != "truncated JSON at byte 4" {
		t.Errorf("truncated: %q", err)
	}
	dec := json.NewDecoder(strings.NewReader(`[1,`))
	err = Describe(dec.Decode(&v))
	if !errors.Is(err, io.ErrUnexpectedEOF) || err.Error() != "truncated JSON" {
		t.Errorf("decoder truncated: %q, is ErrUnexpectedEOF %v", err, errors.Is(err, io.ErrUnexpectedEOF))
	}
	err = Describe(json.NewDecoder(bytes.NewReader(nil)).Decode(&v))
	if !errors.Is(err, io.EOF) || err.Error() != "no JSON value" {
		t.Errorf("empty: %q", err)
	}
	err = DescribeAt(json.Unmarshal([]byte(`[1,x]`), &v), 100)
	var se *json.SyntaxError
	if !errors.As(err, &se) || err.Error() != "malformed JSON at byte 103" {
		t.Errorf("shifted: %q, is SyntaxError %v", err, errors.As(err, &se))
	}
	if again := DescribeAt(err, 50); again != err {
		t.Errorf("described twice: %q", again)
	}
	err = Describe(json.Unmarshal([]byte(`["a"]`), &v))
	if err.Error() != "wrong JSON type at byte 4 (string, want int)" {
		t.Errorf("type: %q", err)
	}
}

// described matches every message Describe may produce for doc: fixed
// words, decimal offsets and lengths, Go-side field paths and types.
var described = regexp.MustCompile(`^(malformed JSON at byte \d+|truncated JSON( at byte \d+)?|no JSON value|` +
	`wrong JSON type( for (name|inner|map|str|hex|n)(\.(name|inner|map|str|hex|n))*)? at byte \d+ \((string|number|bool|null|array|object), want (string|int|jsonerr\.inner|map\[string\]jsonerr\.inner|jsonerr\.hexBytes|jsonerr\.doc)\)|` +
	`unknown key \(\d+ bytes\)|invalid JSON value)$`)

// FuzzDescribe: whatever the input, Describe's message of a json.Decoder's
// (strict or not) and json.Unmarshal's error is one of the fixed forms:
// it cannot hold the input's bytes.
func FuzzDescribe(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/*.json") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var d doc
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.DisallowUnknownFields()
		for _, err := range []error{dec.Decode(&d), json.Unmarshal(in, &d)} {
			if err == nil {
				continue
			}
			msg := Describe(err).Error()
			if !described.MatchString(msg) {
				t.Fatalf("message %q (of %q) is not one of the fixed forms", msg, err)
			}
		}
	})
}

// TestDescribeDecoder: for a json.Decoder read token by token (its
// syntax offsets count only the bytes earlier Decode calls scanned),
// DescribeDecoder names the byte that breaks the syntax: the first '#'
// of each input, or the well-formed token where none is allowed.
func TestDescribeDecoder(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{`{"a":"xx","b":5#}`, -1},
		{`{"a":"xx","b":"yyyy"#}`, -1},
		{`{"a":"x", #"b":1}`, -1},
		{`{"a":["long string value",1,#]}`, -1},
		{`{"a":{"b":"c"}#"d":1}`, -1},
		{`  {"a":tru#e}`, -1},
		{`{"k":"v","` + testutil.EvilMarker + `":#}`, -1},
		{`{"a" 1}`, 5},
		{`{"a":"b" "c":1}`, 9},
	} {
		want := c.want
		if want < 0 {
			want = int64(strings.IndexByte(c.in, '#'))
		}
		src := []byte(c.in)
		dec := json.NewDecoder(bytes.NewReader(src))
		var err error
		for err == nil {
			_, err = dec.Token()
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("%s: no syntax error", src)
			continue
		}
		d := DescribeDecoder(dec, src, 100, err)
		var je *Error
		if !errors.As(d, &je) || je.Offset != 100+want || !strings.HasPrefix(d.Error(), "malformed JSON at byte ") {
			t.Errorf("%s: %v (%v), want malformed JSON at the offending byte %d", src, d, err, 100+want)
		}
		if p, ok := testutil.EchoesEvil(d.Error()); ok {
			t.Errorf("%s: %q echoes %q", src, d, p)
		}
	}
}
