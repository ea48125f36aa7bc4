package wtxt

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestReadIndexDataAfterEnd: ReadIndex refuses bytes after endwtxt as
// Verify does (same line, same check), so Index's ranges tile the file.
func TestReadIndexDataAfterEnd(t *testing.T) {
	for _, name := range []string{"golden-tiny.wtxt", "golden-signed.wtxt", "golden-stream.wtxt"} {
		good := formatstest.ReadTestdata(t, name)
		lines := bytes.Count(good, []byte("\n"))
		for _, tc := range []struct {
			tail  string
			check Check
		}{{"x\n", CheckGrammar}, {"endwtxt\n", CheckGrammar}, {"\n", CheckGrammar}, {"x", CheckText}} {
			b := append(bytes.Clone(good), tc.tail...)
			_, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
			var e *Error
			if !errors.As(err, &e) || e.Line != lines+1 || e.Check != tc.check || e.File != name {
				t.Fatalf("%s + %q: %v, want a %s error at line %d", name, tc.tail, err, tc.check, lines+1)
			}
			_, verr := Verify(context.Background(), bytes.NewReader(b), VerifyOptions{File: name, AllowUnsigned: true, allowPending: true})
			var ve *Error
			if !errors.As(verr, &ve) || ve.Line != e.Line || ve.Check != e.Check {
				t.Fatalf("%s + %q: Verify says %v, ReadIndex %v", name, tc.tail, verr, err)
			}
			// The index of the file without the tail is the file.
			if _, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(good))); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}
