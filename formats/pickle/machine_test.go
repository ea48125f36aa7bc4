package pickle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
)

// pk builds pickles in tests.
type pk struct{ bytes.Buffer }

func (p *pk) op(b ...byte) *pk { p.Write(b); return p }

func (p *pk) str(s string) *pk {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	p.op('X')
	p.Write(n[:])
	p.WriteString(s)
	return p
}

func (p *pk) global(mod, name string) *pk {
	p.op('c')
	p.WriteString(mod + "\n" + name + "\n")
	return p
}

func (p *pk) rep(n int, b ...byte) *pk {
	p.Write(bytes.Repeat(b, n))
	return p
}

// testResolver allows the plain globals and "t.tensor", a callable
// returning its arguments' count.
func testResolver(mod, name string) (*Global, error) {
	if g := PlainGlobal(mod, name); g != nil {
		return g, nil
	}
	if mod == "t" && name == "tensor" {
		return &Global{Module: mod, Name: name, Call: func(args []any) (any, error) { return int64(len(args)), nil }}, nil
	}
	if mod == "t" && name == "refused" {
		return nil, Fail(formats.ErrUnsupported, "global t.refused is allowed elsewhere but not here")
	}
	return nil, nil
}

func load(t *testing.T, b []byte, opts Options) (any, *Machine, error) {
	t.Helper()
	if opts.Resolve == nil {
		opts.Resolve = testResolver
	}
	m := New(context.Background(), b, opts)
	v, err := m.Next()
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("error %v is a %T, not *Error", err, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	}
	return v, m, err
}

func TestValues(t *testing.T) {
	var p pk
	p.op(0x80, 2, '}', 'q', 0)
	p.op('(')
	p.str("ints").op('J', 0xff, 0xff, 0xff, 0xff, 'K', 7, 0x8a, 9, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x87)
	p.str("float").op('G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0)
	p.str("bytes").global("_codecs", "encode").str("\u00ffa").str("latin1").op(0x86, 'R')
	p.str("list").op(']', 'q', 1, '(', 'N', 0x88, 0x89, 'e')
	p.str("od").global("collections", "OrderedDict").op(')', 'R', 'X', 1, 0, 0, 0, 'k', 'h', 1, 's')
	p.str("set").op(0x8f, '(', 'K', 1, 'K', 1, 'K', 2, 0x90)
	p.str("text").op('I').WriteString("12\n")
	p.op('S').WriteString("'a\\x41\\n'\n")
	p.op(0x86)
	p.op('u', '.')
	v, _, err := load(t, p.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*Dict)
	get := func(k string) any {
		x, ok := d.Lookup(k)
		if !ok {
			t.Fatalf("no %q", k)
		}
		return x
	}
	ints := get("ints").(*Tuple).Items
	want := new(big.Int).Lsh(big.NewInt(1), 64)
	want.Add(want, big.NewInt(1))
	if ints[0] != int64(-1) || ints[1] != int64(7) || ints[2].(*big.Int).Cmp(want) != 0 {
		t.Errorf("ints %v", ints)
	}
	if get("float") != 1.5 || !bytes.Equal(get("bytes").(Bytes), []byte{0xff, 'a'}) {
		t.Errorf("float/bytes %v %v", get("float"), get("bytes"))
	}
	if l := get("list").(*List); !reflect.DeepEqual(l.Items, []any{nil, true, false}) {
		t.Errorf("list %v", l.Items)
	}
	od := get("od").(*Dict)
	if od.Class != "collections.OrderedDict" || od.Len() != 1 || od.Keys[0] != "k" {
		t.Errorf("od %+v", od)
	}
	if s := get("set").(*Set); len(s.Items) != 2 {
		t.Errorf("set %v", s.Items)
	}
	if tx := get("text").(*Tuple).Items; tx[0] != int64(12) || tx[1] != "aA\n" {
		t.Errorf("text %v", tx)
	}
}

// TestKeyEquality: Python's key equality: 1 == 1.0 == True, equal
// tuples, distinct string objects of equal content.
func TestKeyEquality(t *testing.T) {
	var p pk
	p.op(0x80, 2, '}')
	p.op('K', 1, 'K', 10, 's')
	p.op('G', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 'K', 11, 's')
	p.op(0x88, 'K', 12, 's')
	p.str("a").op('K', 1, 0x86, 'K', 13, 's')
	p.str("a").op('K', 1, 0x86, 'K', 14, 's')
	p.op('.')
	v, _, err := load(t, p.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*Dict)
	if d.Len() != 2 || d.Vals[0] != int64(12) || d.Vals[1] != int64(14) {
		t.Fatalf("keys %v vals %v", d.Keys, d.Vals)
	}
	// Unhashable keys are corrupt.
	_, _, err = load(t, []byte("\x80\x02}]Ns."), Options{})
	if !errors.Is(err, formats.ErrCorrupt) || !strings.Contains(err.Error(), "unhashable") {
		t.Fatalf("list key: %v", err)
	}
}

// TestDeepTupleKey: audit case 1. A dict key built from a tuple nested
// millions deep made the old keyID recurse without bound (stack
// overflow) and in quadratic time. Tuples are bounded when built...
func TestDeepTupleKey(t *testing.T) {
	var p pk
	p.op(0x80, 2, '}', 'N').rep(8<<20, 0x85).op('N', 's', '.')
	_, m, err := load(t, p.Bytes(), Options{Budget: formats.NewBudget(256 << 20)})
	if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "nested deeper than 1000") {
		t.Fatalf("got %v", err)
	}
	if m.Steps() > 3*DefaultMaxDepth+10 {
		t.Errorf("%d steps before the depth limit", m.Steps())
	}
}

// ...and a key's identity costs its length once, not its depth per use:
// a 1000-deep tuple used as a key 200000 times is linear work.
func TestDeepTupleKeyReused(t *testing.T) {
	const uses = 200000
	var p pk
	p.op(0x80, 2, '}', 'N').rep(DefaultMaxDepth-1, 0x85).op('q', 0, 'N', 's')
	p.rep(uses, 'h', 0, 'N', 's')
	p.op('.')
	b := formats.NewBudget(64 << 20)
	v, m, err := load(t, p.Bytes(), Options{Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	if d := v.(*Dict); d.Len() != 1 {
		t.Fatalf("%d keys", d.Len())
	}
	if m.Steps() > 6*uses+4*DefaultMaxDepth {
		t.Errorf("%d steps", m.Steps())
	}
	if used := b.Limit() - b.Remaining(); used > 1<<20 {
		t.Errorf("charged %d bytes", used)
	}
}

// TestMemoizedBigStringKey: audit case 2. One memoized 4 MB string used
// as a dict key a million times (BINGET, NONE, SETITEM) took the old
// code ~50 CPU-minutes; values are references now and the string is
// hashed once: the work and the charge stay linear.
func TestMemoizedBigStringKey(t *testing.T) {
	const uses = 1 << 20
	var p pk
	p.op(0x80, 2, '}').str(strings.Repeat("k", 4<<20)).op('q', 0, '0')
	p.rep(uses, 'h', 0, 'N', 's')
	p.op('.')
	b := formats.NewBudget(256 << 20)
	v, m, err := load(t, p.Bytes(), Options{Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	if d := v.(*Dict); d.Len() != 1 {
		t.Fatalf("%d keys", d.Len())
	}
	if m.Steps() > 6*uses {
		t.Errorf("%d steps for %d opcodes", m.Steps(), 3*uses)
	}
	// The string (4 MiB) and its table entry once, not a million times.
	if used := b.Limit() - b.Remaining(); used > 10<<20 {
		t.Errorf("charged %d bytes", used)
	}
}

// TestCancel: a cancelled context ends the decode (checked every
// CheckEvery opcodes), with the context's error.
func TestCancel(t *testing.T) {
	var p pk
	p.op(0x80, 2, '}').str("k").op('q', 0, '0')
	p.rep(4*CheckEvery, 'h', 0, 'N', 's')
	p.op('.')
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := New(ctx, p.Bytes(), Options{Resolve: testResolver}).Next()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// TestObjectsCharged: audit case 3. Millions of EMPTY_LISTs (5.4 GB RSS
// in the old code from a 65 KB file) or nested TUPLE1s are charged to
// the budget as they are built and fail with ErrLimit.
func TestObjectsCharged(t *testing.T) {
	for name, b := range map[string][]byte{
		"EMPTY_LIST":  append(append([]byte{0x80, 2}, bytes.Repeat([]byte{']'}, 1<<20)...), '.'),
		"EMPTY_DICT":  append(append([]byte{0x80, 2}, bytes.Repeat([]byte{'}'}, 1<<20)...), '.'),
		"NONE":        append(append([]byte{0x80, 2}, bytes.Repeat([]byte{'N'}, 1<<20)...), '.'),
		"TUPLE1 wide": append(append([]byte{0x80, 2}, bytes.Repeat([]byte{'N', 0x85}, 1<<20)...), '.'),
		"memo":        append(append([]byte{0x80, 2, 'N'}, bytes.Repeat([]byte{0x94}, 1<<20)...), '.'),
	} {
		t.Run(name, func(t *testing.T) {
			budget := formats.NewBudget(8 << 20)
			_, _, err := load(t, b, Options{Budget: budget})
			if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "decode budget") {
				t.Fatalf("got %v", err)
			}
			if budget.Remaining() > budget.Limit() {
				t.Fatal("budget overdrawn")
			}
		})
	}
	// Nested TUPLE1s hit the depth bound first.
	deep := append(append([]byte{0x80, 2, 'N'}, bytes.Repeat([]byte{0x85}, 1<<20)...), '.')
	if _, _, err := load(t, deep, Options{Budget: formats.NewBudget(8 << 20)}); !errors.Is(err, formats.ErrLimit) {
		t.Fatalf("nested TUPLE1: %v", err)
	}
}

// TestSteps: the work is bounded by the pickle's length: a call of a
// global with a large memoized argument tuple, repeated, runs out of
// steps (each call may copy its arguments).
func TestSteps(t *testing.T) {
	var p pk
	p.op(0x80, 2, '(').rep(10000, 'N').op('t', 'q', 0, '0')
	p.global("t", "tensor").op('q', 1, '0')
	p.rep(100000, 'h', 1, 'h', 0, 'R', '0')
	p.op('N', '.')
	_, _, err := load(t, p.Bytes(), Options{})
	if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "steps") {
		t.Fatalf("got %v", err)
	}
}

// TestUnknownGlobals: a global outside the allowlist is refused naming
// its key path; with Placeholders it becomes an *Opaque listed with its
// path, and every other value is still read.
func TestUnknownGlobals(t *testing.T) {
	var p pk
	p.op(0x80, 2, '}')
	p.str("step").op('K', 3, 's')
	p.str("scheduler").op('}').str("anneal_func").global("torch.optim.lr_scheduler", "_cosine").op('s', 's')
	p.str("rng").global("numpy.core.multiarray", "_reconstruct").op('(').str("x").op('K', 1, 't', 'R')
	p.op('}').str("state").op('K', 9, 's', 'b', 's')
	p.str("other").global("t", "refused").op('s')
	p.op('.')

	_, _, err := load(t, p.Bytes(), Options{})
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, ErrRefused) || !errors.Is(err, formats.ErrUnsupported) {
		t.Fatalf("strict: %v", err)
	}
	if pe.Path != "scheduler.anneal_func" || pe.Global != "torch.optim.lr_scheduler._cosine" ||
		!strings.Contains(err.Error(), `key path "scheduler.anneal_func": global torch.optim.lr_scheduler._cosine is not allowed`) {
		t.Fatalf("strict: %v (%+v)", err, pe)
	}

	v, _, err := load(t, p.Bytes(), Options{Placeholders: true})
	if err != nil {
		t.Fatal(err)
	}
	us, err := Unknowns(v, WalkLimits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range us {
		got = append(got, u.Path+"="+u.Opaque.FullName())
	}
	want := []string{"scheduler.anneal_func=torch.optim.lr_scheduler._cosine", "rng=numpy.core.multiarray._reconstruct", "other=t.refused"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("unknowns %v, want %v", got, want)
	}
	rng := us[1].Opaque
	if !rng.Called || len(rng.Args) != 2 || rng.Args[0] != "x" || rng.Class == nil || rng.State.(*Dict).Vals[0] != int64(9) {
		t.Fatalf("rng placeholder %+v", rng)
	}
	if us[2].Opaque.Reason != "global t.refused is allowed elsewhere but not here" {
		t.Fatalf("reason %q", us[2].Opaque.Reason)
	}
	if step, _ := v.(*Dict).Lookup("step"); step != int64(3) {
		t.Fatalf("step %v", step)
	}
}

// TestRefusedOpcodes: opcodes that build arbitrary objects are refused
// even with placeholders; a failure after an unknown global reports the
// global.
func TestRefusedOpcodes(t *testing.T) {
	_, _, err := load(t, []byte("\x80\x02(ios\nsystem\n."), Options{Placeholders: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "offset 3: pickle opcode 0x69") {
		t.Fatalf("INST: %v", err)
	}
	_, _, err = load(t, []byte("\x80\x02cos\nsystem\nK\x01K\x01R."), Options{Base: 100})
	if !errors.Is(err, ErrRefused) || err.Error() != "offset 102: global os.system is not allowed" {
		t.Fatalf("call after refusal: %v", err)
	}
}

func TestErrorsAreLocated(t *testing.T) {
	for _, b := range [][]byte{
		[]byte("\x80\x02X\xff\xff\xff\x7fabc."),
		[]byte("\x80"),
		[]byte("\x80\x02}"),
		[]byte("\x80\x02I12"),
		[]byte("\x80\x02\x95\xff\xff\xff\xff\xff\xff\xff\x7f."),
		[]byte("\x80\x02\x8e\xff\xff\xff\xff\xff\xff\xff\x7f."),
		[]byte("\x80\x02h\x05."),
		[]byte("\x80\x02Q."),
		[]byte("\x80\x09."),
	} {
		_, _, err := load(t, b, Options{})
		if err == nil || !strings.HasPrefix(err.Error(), "offset ") {
			t.Errorf("% x: %v", b, err)
		}
	}
}

// TestProtocols: the same object pickled by CPython with protocols 0–5
// loads to the same values.
func TestProtocols(t *testing.T) {
	var first string
	for proto := 0; proto <= 5; proto++ {
		b, err := os.ReadFile(fmt.Sprintf("testdata/plain_proto%d.pkl", proto))
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := load(t, b, Options{})
		if err != nil {
			t.Fatalf("protocol %d: %v", proto, err)
		}
		got := render(v)
		if proto == 0 {
			first = got
		} else if got != first {
			t.Errorf("protocol %d: %s\nprotocol 0: %s", proto, got, first)
		}
	}
	if !strings.Contains(first, `"big"`) {
		t.Fatalf("rendered %s", first)
	}
}

// render is a canonical text of plain values for comparisons.
func render(v any) string {
	switch x := v.(type) {
	case *List:
		return "[" + renderAll(x.Items) + "]"
	case *Tuple:
		return "(" + renderAll(x.Items) + ")"
	case *Set:
		return fmt.Sprintf("set%v{%s}", x.Frozen, renderAll(x.Items))
	case *Dict:
		var parts []string
		for i := range x.Keys {
			parts = append(parts, render(x.Keys[i])+":"+render(x.Vals[i]))
		}
		return x.Class + "{" + strings.Join(parts, ",") + "}"
	case string:
		return strconv.Quote(x)
	case Bytes:
		return "b" + strconv.Quote(string(x))
	}
	return fmt.Sprint(v)
}

func renderAll(items []any) string {
	var parts []string
	for _, e := range items {
		parts = append(parts, render(e))
	}
	return strings.Join(parts, ",")
}
