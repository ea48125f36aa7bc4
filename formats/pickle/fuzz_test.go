package pickle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
)

// seedShapes are small versions of the hostile shapes the machine bounds
// (deep tuple keys, a memoized key reused, object floods, unknown
// globals) and of ordinary pickles.
func seedShapes() [][]byte {
	var deep, memo, flood, unknown pk
	deep.op(0x80, 2, '}', 'N').rep(1100, 0x85).op('N', 's', '.')
	memo.op(0x80, 2, '}').str(strings.Repeat("k", 300)).op('q', 0, '0').rep(50, 'h', 0, 'N', 's').op('.')
	flood.op(0x80, 2).rep(200, ']').rep(199, 'a').op('.')
	unknown.op(0x80, 2, '}').str("s").global("m", "f").op(')', 'R', '}', 'b', 's', '.')
	return [][]byte{deep.Bytes(), memo.Bytes(), flood.Bytes(), unknown.Bytes(),
		[]byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s."),
		[]byte("(lp0\nI1\naF2.5\naS'x'\np1\naV\\u00e9\na."),
		[]byte("\x80\x02ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00ac_codecs\nencode\nX\x01\x00\x00\x00bX\x06\x00\x00\x00latin1\x86Ru}Q."),
	}
}

// FuzzLoad: the machine never panics, fails only with located one-line
// *Error values, and keeps its charges within the budget; what loads
// walks without error and within the default bounds.
func FuzzLoad(f *testing.F) {
	for _, b := range seedShapes() {
		f.Add(b, false)
		f.Add(b, true)
	}
	files, _ := filepath.Glob("testdata/*.pkl")
	if len(files) == 0 {
		f.Fatal("no testdata/*.pkl seeds")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, placeholders bool) {
		budget := formats.NewBudget(8 << 20)
		m := New(context.Background(), b, Options{Resolve: testResolver, Budget: budget, Placeholders: placeholders,
			Persistent: func(pid any) (any, error) { return pid, nil }})
		v, err := m.Next()
		if budget.Remaining() < 0 {
			t.Fatal("budget overdrawn")
		}
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("%T error %v", err, err)
			}
			if strings.Contains(err.Error(), "\n") || bytes.Contains(b, []byte(pe.Check)) && len(pe.Check) > 40 {
				t.Fatalf("error %q", err)
			}
			return
		}
		if m.Steps() > StepsSlack+StepsPerByte*int64(len(b)) {
			t.Fatalf("%d steps", m.Steps())
		}
		if _, err := Unknowns(v, WalkLimits{MaxNodes: 1 << 16}); err != nil && !errors.Is(err, formats.ErrLimit) {
			t.Fatal(err)
		}
	})
}
