package wtxt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// setField replaces the value of key= on the first line starting with
// prefix+" " (the value runs to the next space or the end of the line).
func setField(t *testing.T, b []byte, prefix, key, val string) []byte {
	t.Helper()
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix+" ") {
			continue
		}
		k := strings.Index(l, " "+key+"=")
		if k < 0 {
			t.Fatalf("line %q has no %s=", l, key)
		}
		start := k + len(key) + 2
		end := strings.IndexByte(l[start:], ' ')
		if end < 0 {
			end = len(l)
		} else {
			end += start
		}
		lines[i] = l[:start] + val + l[end:]
		return []byte(strings.Join(lines, "\n"))
	}
	t.Fatalf("no %s line", prefix)
	return nil
}

// TestFieldErrorsNeverEcho puts a hostile value in every field of a
// golden file's meta, arr, idx and ch lines (and an audit key): the
// verifier, the header reader and the decoder refuse it at the field's
// line with the check and field named, and never quote the value.
func TestFieldErrorsNeverEcho(t *testing.T) {
	golden, err := os.ReadFile("testdata/golden-tiny.wtxt")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		prefix, key string
		line        int
		want        string // the field as the message names it
	}{
		{"meta", "schema", 2, "meta schema"},
		{"meta", "gen", 2, "meta gen"},
		{"meta", "ts", 2, "meta ts: timestamp"},
		{"meta", "build", 2, "meta build"},
		{"meta", "endian", 2, "meta endian"},
		{"meta", "host", 2, "meta host"},
		{"meta", "cuda", 2, "meta cuda"},
		{"arr", "name", 5, "arr name"},
		{"arr", "dtype", 5, "unknown dtype"},
		{"arr", "shape", 5, "shape"},
		{"arr", "order", 5, "order"},
		{"arr", "bytes", 5, "bytes"},
		{"idx", "row_blocking", 6, "row_blocking"},
		{"ch", "ix", 7, "ch ix"},
		{"ch", "off", 7, "ch off"},
		{"ch", "len", 7, "ch len"},
		{"ch", "lines", 7, "ch lines"},
	}
	for _, tc := range cases {
		for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
			in := setField(t, golden, tc.prefix, tc.key, evil)
			name := tc.prefix + " " + tc.key
			_, verr := Verify(ctx, bytes.NewReader(in), VerifyOptions{})
			var e *Error
			if !errors.As(verr, &e) {
				t.Fatalf("%s: Verify: %v, want *Error", name, verr)
			}
			if e.Line != tc.line {
				t.Errorf("%s: Verify: line %d, want %d: %v", name, e.Line, tc.line, verr)
			}
			if evil == testutil.EvilMarker {
				// The printable marker reaches the field's own check.
				if e.Check != CheckGrammar || !strings.Contains(e.Msg, tc.want) {
					t.Errorf("%s: Verify: %v, want check %s naming %q", name, verr, CheckGrammar, tc.want)
				}
			}
			errs := []error{verr}
			_, derr := New().Decode(ctx, bytes.NewReader(in), int64(len(in)), decodeOpts())
			errs = append(errs, derr)
			if tc.prefix == "meta" {
				_, herr := ReadHeader(bytes.NewReader(in))
				errs = append(errs, herr)
			}
			for _, err := range errs {
				if err == nil {
					t.Errorf("%s: accepted", name)
					continue
				}
				if p, ok := testutil.EchoesEvil(err.Error()); ok {
					t.Errorf("%s: error quotes the value (%q): %v", name, p, err)
				}
			}
		}
	}

	// An audit line with a hostile key.
	in := bytes.Replace(golden, []byte("\nendwtxt\n"), []byte("\naudit "+testutil.EvilMarker+"=1\nendwtxt\n"), 1)
	_, err = Verify(ctx, bytes.NewReader(in), VerifyOptions{})
	var e *Error
	if !errors.As(err, &e) || e.Check != CheckGrammar || !strings.Contains(e.Msg, "audit: field 1: key") {
		t.Fatalf("audit key: %v", err)
	}
	if p, ok := testutil.EchoesEvil(err.Error()); ok {
		t.Errorf("audit key: error quotes the key (%q): %v", p, err)
	}
}

// TestSegErrorsNeverEcho: hostile seg chunks= and len= values in a
// skeleton are refused at their line without being quoted.
func TestSegErrorsNeverEcho(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	skel, blobs, _ := splitBytes(t, in, 100<<10)
	for _, key := range []string{"chunks", "len"} {
		for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
			bad := setField(t, skel, "seg", key, evil)
			_, serr := SkeletonSegments(context.Background(), bytes.NewReader(bad), "g.skel")
			_, aerr := assembleBytes(bad, blobs)
			for _, err := range []error{serr, aerr} {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("seg %s: %v, want *Error", key, err)
				}
				if e.Line < 2 {
					t.Errorf("seg %s: no line: %v", key, err)
				}
				if evil == testutil.EvilMarker && !strings.Contains(e.Msg, "seg "+key) {
					t.Errorf("seg %s: %v does not name the field", key, err)
				}
				if p, ok := testutil.EchoesEvil(err.Error()); ok {
					t.Errorf("seg %s: error quotes the value (%q): %v", key, p, err)
				}
			}
		}
	}
}

// fixedTexts are the format's constants that an error may spell out (the
// line it expected): testutil.EchoedRun ignores them.
func fixedTexts() []string {
	return []string{pendingNote, strconv.Quote(magicLine), strconv.Quote(SkeletonMagic), strconv.Quote(endLine), strconv.Quote(DeltaMagic), deltaStartShape, segLineShape}
}
