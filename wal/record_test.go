package wal

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

func TestLineRoundTrip(t *testing.T) {
	cases := []Request{
		{Gen: 0, Time: time.Unix(0, 0), Requester: "a", Source: "/x"},
		{Gen: 123, Time: time.Unix(1760000000, 123456789), Requester: "trainer:4711@host-1", Source: "/ckpt/gen-000123.zt"},
		{Gen: 1<<64 - 1, Time: time.Unix(0, 1<<63-1), Requester: strings.Repeat("Z", MaxRequesterLen), Source: "dir with space/ümlaut%25\n\x00\x7f"},
	}
	for _, r := range cases {
		// appendLine: the parser reads gens that writers refuse (0, above
		// MaxGen); their encoding must still round-trip.
		line, err := r.appendLine(nil)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		for _, c := range line[:len(line)-1] {
			if c < 0x21 && c != ' ' || c > 0x7e {
				t.Fatalf("non-printable byte %q in line %q", c, line)
			}
		}
		got, err := ParseLine(line)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		if got.Gen != r.Gen || !got.Time.Equal(r.Time) || got.Requester != r.Requester || got.Source != r.Source {
			t.Fatalf("round trip: got %+v want %+v", got, r)
		}
	}
}

// The documented example line in doc.go must be exactly what the encoder
// writes.
func TestDocExample(t *testing.T) {
	r := Request{Gen: 123, Time: time.Unix(1760000000, 5), Requester: "trainer:4711", Source: "/data/gens/gen-000123.safetensors"}
	line, err := r.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	const want = "snapreq/1 gen=123 ts=1760000000000000005 by=trainer:4711 src=/data/gens/gen-000123.safetensors crc=2194d071\n"
	if string(line) != want {
		t.Fatalf("encoded\n%q\nwant (doc.go example)\n%q", line, want)
	}
}

func TestEncodeErrors(t *testing.T) {
	base := Request{Gen: 1, Time: time.Unix(1, 0), Requester: "x", Source: "/p"}
	cases := map[string]func(*Request){
		"empty requester": func(r *Request) { r.Requester = "" },
		"long requester":  func(r *Request) { r.Requester = strings.Repeat("a", MaxRequesterLen+1) },
		"space requester": func(r *Request) { r.Requester = "a b" },
		"empty source":    func(r *Request) { r.Source = "" },
		"negative time":   func(r *Request) { r.Time = time.Unix(-1, 0) },
	}
	for name, mod := range cases {
		r := base
		mod(&r)
		if _, err := r.AppendLine(nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: got %v, want ErrInvalidRequest", name, err)
		}
	}
	r := base
	r.Source = strings.Repeat("/", MaxLineSize)
	if _, err := r.AppendLine(nil); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("long source: got %v, want ErrLineTooLong", err)
	}
	// A source that just fits.
	line, _ := base.AppendLine(nil)
	r.Source = base.Source + strings.Repeat("a", MaxLineSize-len(line))
	if line, err := r.AppendLine(nil); err != nil || len(line) != MaxLineSize {
		t.Errorf("max source: len %d err %v", len(line), err)
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := (&Request{Gen: 7, Time: time.Unix(5, 0), Requester: "x", Source: "/a%b"}).AppendLine(nil)
	if _, err := ParseLine(good); err != nil {
		t.Fatal(err)
	}
	withCRC := func(body string) []byte { return []byte(body + crcSuffix(body)) }
	cases := map[string][]byte{
		"flipped bit":    flip(good, 15),
		"garbage":        []byte("hello world\n"),
		"empty":          nil,
		"bad crc hex":    []byte(strings.Replace(string(good), "crc=", "crc=X", 1)[:len(good)]),
		"leading zero":   withCRC("snapreq/1 gen=07 ts=5 by=x src=/a"),
		"lower escape":   withCRC("snapreq/1 gen=7 ts=5 by=x src=/a%2f"),
		"needless esc":   withCRC("snapreq/1 gen=7 ts=5 by=x src=/a%41"),
		"trunc escape":   withCRC("snapreq/1 gen=7 ts=5 by=x src=/a%2"),
		"ts overflow":    withCRC("snapreq/1 gen=7 ts=9223372036854775808 by=x src=/a"),
		"gen overflow":   withCRC("snapreq/1 gen=18446744073709551616 ts=1 by=x src=/a"),
		"bad requester":  withCRC("snapreq/1 gen=7 ts=5 by=a,b src=/a"),
		"empty src":      withCRC("snapreq/1 gen=7 ts=5 by=x src="),
		"field order":    withCRC("snapreq/1 ts=5 gen=7 by=x src=/a"),
		"wrong magic":    withCRC("snapreq/2 gen=7 ts=5 by=x src=/a"),
		"space in src":   withCRC("snapreq/1 gen=7 ts=5 by=x src=/a b"),
		"missing by":     withCRC("snapreq/1 gen=7 ts=5 src=/a"),
		"too long":       withCRC("snapreq/1 gen=7 ts=5 by=x src=/" + strings.Repeat("a", MaxLineSize)),
		"upper crc text": []byte(strings.ToUpper(string(good))),
	}
	for name, line := range cases {
		_, err := ParseLine(line)
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %q: got %v, want *ParseError wrapping ErrCorrupt", name, line, err)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}

// crcSuffix returns " crc=XXXXXXXX\n" for body.
func crcSuffix(body string) string {
	l := kvLine(body)
	return string(l[len(body):])
}

func FuzzParseLine(f *testing.F) {
	for _, r := range []Request{
		{Gen: 123, Time: time.Unix(1760000000, 5), Requester: "trainer:4711", Source: "/data/gens/gen-000123.safetensors"},
		{Gen: 0, Time: time.Unix(0, 0), Requester: "a", Source: "a b%c\x00"},
		{Gen: 7, Time: time.Unix(1, 0), Requester: "py:1", Source: "/s/rank-3", Rank: 3, WorldSize: 4},
		{Gen: 9, Time: time.Unix(1, 0), Requester: "py:1", Source: "/s/g9", ResumedFrom: 2, Meta: mustMeta(f, `{"loss":0.41,"note":"50% done","step":1200}`)},
	} {
		line, err := r.appendLine(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line)
	}
	f.Add([]byte("snapreq/1 gen=1 ts=1 by=x src=%\n"))
	fixed := testutil.SourceTexts(f, ".")
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), line, fixed...); ok {
				t.Fatalf("error echoes the line run %q: %v", run, err)
			}
			return
		}
		// Canonical: what parses re-encodes byte for byte.
		out, err := r.appendLine(nil)
		if err != nil {
			t.Fatalf("parsed %q but cannot re-encode: %v", line, err)
		}
		want := string(line)
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if string(out) != want {
			t.Fatalf("not canonical:\n in %q\nout %q", line, out)
		}
	})
}

// Generation numbers are bounded to what the WTXT writer
// and parser agree on; writers refuse the rest with a clear error.
func TestGenBound(t *testing.T) {
	for _, gen := range []uint64{0, MaxGen + 1, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		r := Request{Gen: gen, Time: time.Unix(1, 0), Requester: "a", Source: "/x"}
		if _, err := r.AppendLine(nil); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "out of range 1..999999999999999999") {
			t.Fatalf("gen %d: %v", gen, err)
		}
		dir := t.TempDir()
		if err := Append(dir, r); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Append gen %d: %v", gen, err)
		}
		// Nothing was written.
		if ents, _ := List(dir, nil); len(ents) != 0 {
			t.Fatalf("gen %d: %d requests in the WAL", gen, len(ents))
		}
	}
	for _, gen := range []uint64{1, MaxGen} {
		r := Request{Gen: gen, Time: time.Unix(1, 0), Requester: "a", Source: "/x"}
		line, err := r.AppendLine(nil)
		if err != nil {
			t.Fatalf("gen %d: %v", gen, err)
		}
		if got, err := ParseLine(line); err != nil || got.Gen != gen {
			t.Fatalf("gen %d: %+v %v", gen, got, err)
		}
	}
}

// The Python helper's bound is the same number.
func TestMaxGenIs18Digits(t *testing.T) {
	if MaxGen != 999_999_999_999_999_999 || len(strconv.FormatUint(MaxGen, 10)) != 18 || MaxGen >= 1<<63-1 {
		t.Fatalf("MaxGen %d", MaxGen)
	}
}

// TestParseErrorsNeverEcho: a WAL line with a hostile requester, state or
// escape is refused without quoting it.
func TestParseErrorsNeverEcho(t *testing.T) {
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		err := Request{Gen: 1, Time: time.Unix(1, 0), Requester: evil, Source: "x"}.validateFields()
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "requester") {
			t.Fatalf("requester: %v", err)
		}
		if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("requester: error quotes it (%q): %v", p, err)
		}
		if _, err := ParseLine([]byte("snapreq/1 gen=1 ts=1 by=" + evil + " src=x\n")); err == nil {
			t.Fatal("hostile requester parsed")
		} else if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("line: error quotes the requester (%q): %v", p, err)
		}
	}
}
