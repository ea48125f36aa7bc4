package pickle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/formats"
)

// Budget is what a Machine charges for the memory of the objects it
// builds; *formats.Budget implements it. Take fails (wrapping
// formats.ErrLimit) when n more bytes are not allowed.
type Budget interface {
	Take(n int64, what string) error
}

// Resolver maps a global (module, name) to its behaviour. It returns
// (g, nil) for an allowed global, (nil, nil) for one outside the
// allowlist, and (nil, err) to refuse it with a reason (err's message,
// e.g. "allowed by torch but not supported", class from Fail). It must
// not look the name up anywhere but in its own table.
type Resolver func(module, name string) (*Global, error)

// PersistentLoader resolves a BINPERSID/PERSID id (already a value of
// this package) to a value: a storage, or an error (made with Fail, or
// a *formats.Error that already names its place, which is returned as
// is).
type PersistentLoader func(pid any) (any, error)

// Options configures a Machine.
type Options struct {
	// Resolve is the allowlist. nil allows no global.
	Resolve Resolver
	// Persistent loads persistent ids; nil refuses them (ErrCorrupt).
	Persistent PersistentLoader
	// Budget is charged for every object built (see the package
	// documentation for the costs); nil charges nothing.
	Budget Budget
	// Placeholders selects the unknown-global mode: a global the resolver
	// does not allow (nil, nil) or refuses with an error of class
	// formats.ErrUnsupported becomes an *Opaque instead of an error.
	// Without it the pickle is refused: the error names the first such
	// global, its offset and, when the result holds it, its key path.
	Placeholders bool
	// Base is the file offset of the pickle's first byte (for errors).
	Base int64
	// MaxSteps bounds the work: one step per opcode plus one per item an
	// opcode moves or an applied global receives. 0 selects StepsPerByte
	// × the pickle's length + StepsSlack.
	MaxSteps int64
	// MaxDepth bounds tuple nesting (and with it the recursion of key
	// identities); 0 selects DefaultMaxDepth.
	MaxDepth int
	// MaxMemo bounds the memo's entries; 0 selects DefaultMaxMemo.
	MaxMemo int
	// MaxMarks bounds nested MARKs; 0 selects DefaultMaxMarks.
	MaxMarks int
}

// Default bounds.
const (
	DefaultMaxDepth = 1000
	DefaultMaxMemo  = 1 << 20
	DefaultMaxMarks = 1000
	// StepsPerByte and StepsSlack make the default step budget: a valid
	// pickle needs about one step per opcode and one per item moved
	// (each item was pushed by an opcode of at least one byte).
	StepsPerByte = 16
	StepsSlack   = 1 << 20
	// CheckEvery is how many opcodes run between checks of the context.
	CheckEvery = 1 << 12
)

// Memory charged to the Budget per object, in bytes (an honest
// approximation of what Go allocates for it).
const (
	objectCost = 64 // a container, a global, a placeholder, a call's result
	slotCost   = 16 // an item of a list, tuple, set or stack (an interface value)
	entryBytes = 64 // a dict entry (two slots and its index), a memo entry
	// chargeBatch: charges are passed to the Budget in batches of at
	// least this many bytes (and at the end of each pickle).
	chargeBatch = 64 << 10
)

// Machine is a pickle virtual machine that builds only the values listed
// in values.go. A Machine runs the pickles found one after another in
// one buffer (torch's legacy format is five pickles back to back); the
// step budget and the charges are shared by them, the memo is not.
type Machine struct {
	ctx   context.Context
	b     []byte
	pos   int
	opts  Options
	stack []any
	marks [][]any
	memo  map[uint32]any
	keys  *keyer

	steps, maxSteps int64
	ops             int
	pending         int64 // charged, not yet taken from the Budget
	slots, slotsHW  int64 // stack slots in use, and the most charged
	unknown         *Opaque
	unknownErr      string
	unknownClass    error
}

// New returns a machine reading pickles from b (not copied: b must not
// change while the machine runs).
func New(ctx context.Context, b []byte, opts Options) *Machine {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.MaxMemo <= 0 {
		opts.MaxMemo = DefaultMaxMemo
	}
	if opts.MaxMarks <= 0 {
		opts.MaxMarks = DefaultMaxMarks
	}
	maxSteps := opts.MaxSteps
	if maxSteps <= 0 {
		maxSteps = StepsSlack
		if int64(len(b)) < (math.MaxInt64-StepsSlack)/StepsPerByte {
			maxSteps += StepsPerByte * int64(len(b))
		}
	}
	return &Machine{ctx: ctx, b: b, opts: opts, keys: newKeyer(opts.MaxDepth), maxSteps: maxSteps}
}

// Load runs one pickle and returns its result: the whole of b for a
// single pickle. It is New(ctx, b, opts).Next().
func Load(ctx context.Context, b []byte, opts Options) (any, error) {
	return New(ctx, b, opts).Next()
}

// Pos is the position in the buffer after the last STOP read.
func (m *Machine) Pos() int { return m.pos }

// Steps is the work done so far (see Options.MaxSteps).
func (m *Machine) Steps() int64 { return m.steps }

// SetPersistent replaces the persistent-id loader for the next pickles.
func (m *Machine) SetPersistent(p PersistentLoader) { m.opts.Persistent = p }

// Next runs the pickle starting at Pos up to its STOP and returns the
// result; the memo starts empty. Errors are *Error values (a context's
// error and a loader's *formats.Error are returned as they are).
func (m *Machine) Next() (any, error) {
	m.memo = map[uint32]any{}
	m.stack = m.stack[:0]
	m.marks = m.marks[:0]
	m.slots = 0
	m.unknown, m.unknownErr, m.unknownClass = nil, "", nil
	v, err := m.run()
	if err == nil {
		err = m.flush(m.pos - 1)
	}
	if err != nil {
		return nil, err
	}
	if m.unknown != nil && !m.opts.Placeholders {
		return nil, m.refusal(v)
	}
	return v, nil
}

func (m *Machine) run() (any, error) {
	for {
		at := m.pos
		if m.pos >= len(m.b) {
			return nil, m.fail(at, formats.ErrCorrupt, "pickle ends without STOP")
		}
		m.ops++
		if m.ops%CheckEvery == 0 {
			if err := m.ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := m.step(at, 1); err != nil {
			return nil, err
		}
		op := m.b[m.pos]
		m.pos++
		if op == '.' { // STOP
			if len(m.stack) != 1 || len(m.marks) != 0 {
				return nil, m.fail(at, formats.ErrCorrupt, "STOP with %d values on the stack and %d open MARKs", len(m.stack), len(m.marks))
			}
			return m.stack[0], nil
		}
		if err := m.exec(op, at); err != nil {
			return nil, m.located(at, err)
		}
	}
}

// located turns a failure at opcode at into the error to return: in
// strict mode a pending unknown global is the reason of anything that
// fails after it.
func (m *Machine) located(at int, err error) error {
	if isContext(err) {
		return err
	}
	var fe *formats.Error
	if errors.As(err, &fe) {
		return err
	}
	if m.unknown != nil && !m.opts.Placeholders {
		return m.refusal(nil)
	}
	var pe *Error
	if errors.As(err, &pe) {
		if pe.Offset < 0 {
			pe.Offset = m.opts.Base + int64(at)
		}
		return pe
	}
	return &Error{Offset: m.opts.Base + int64(at), Check: err.Error(), Err: classOf(err)}
}

// refusal is the strict-mode error for the first unknown global; result
// (nil when the pickle did not complete) gives its key path.
func (m *Machine) refusal(result any) error {
	u := m.unknown
	e := &Error{Offset: u.Offset, Global: u.FullName(), Check: m.unknownErr, Err: m.unknownClass}
	if result != nil {
		_ = Walk(result, WalkLimits{}, func(path []string, v any) bool {
			if o, ok := v.(*Opaque); ok && (o == u || o.Class == u) {
				e.Path = JoinPath(path)
				return false
			}
			return true
		})
	}
	return e
}

func (m *Machine) fail(at int, class error, format string, args ...any) error {
	return &Error{Offset: m.opts.Base + int64(at), Check: fmt.Sprintf(format, args...), Err: class}
}

// step charges n steps.
func (m *Machine) step(at int, n int64) error {
	m.steps += n
	if m.steps > m.maxSteps {
		return m.fail(at, formats.ErrLimit, "the pickle needs more than %d steps (%d per byte of its %d bytes, plus %d)", m.maxSteps, StepsPerByte, len(m.b), StepsSlack)
	}
	return nil
}

// charge accounts n bytes of new objects.
func (m *Machine) charge(at int, n int64) error {
	m.pending += n
	if m.pending >= chargeBatch {
		return m.flush(at)
	}
	return nil
}

func (m *Machine) flush(at int) error {
	n := m.pending + m.keys.cost
	m.pending, m.keys.cost = 0, 0
	if n == 0 || m.opts.Budget == nil {
		return nil
	}
	if err := m.opts.Budget.Take(n, "objects the pickle builds"); err != nil {
		return &Error{Offset: m.opts.Base + int64(at), Check: "the objects built exceed the decode budget: " + err.Error(), Err: classOf(err)}
	}
	return nil
}

func (m *Machine) push(at int, v any) error {
	m.stack = append(m.stack, v)
	m.slots++
	if m.slots > m.slotsHW {
		// Charged in steps of 1024 slots.
		grow := max(m.slots-m.slotsHW, 1024)
		m.slotsHW += grow
		return m.charge(at, grow*slotCost)
	}
	return nil
}

func (m *Machine) need(at, n int) ([]byte, error) {
	if n < 0 || n > len(m.b)-m.pos {
		return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x needs %d bytes, %d left", m.b[at], n, len(m.b)-m.pos)
	}
	p := m.b[m.pos : m.pos+n]
	m.pos += n
	return p, nil
}

// lenArg reads a little-endian length of width bytes and checks it
// against the bytes left.
func (m *Machine) lenArg(at, width int, signed bool) (int, error) {
	p, err := m.need(at, width)
	if err != nil {
		return 0, err
	}
	var n uint64
	for i := width - 1; i >= 0; i-- {
		n = n<<8 | uint64(p[i])
	}
	if signed && width == 4 && int32(n) < 0 {
		return 0, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: negative length", m.b[at])
	}
	if n > uint64(len(m.b)-m.pos) {
		return 0, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: length %d exceeds the %d bytes left", m.b[at], n, len(m.b)-m.pos)
	}
	return int(n), nil
}

// data reads a length-prefixed argument.
func (m *Machine) data(at, width int, signed bool) ([]byte, error) {
	n, err := m.lenArg(at, width, signed)
	if err != nil {
		return nil, err
	}
	return m.need(at, n)
}

func (m *Machine) line(at int) ([]byte, error) {
	for i := m.pos; i < len(m.b); i++ {
		if m.b[i] == '\n' {
			s := m.b[m.pos:i]
			m.pos = i + 1
			return s, nil
		}
	}
	return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: unterminated line argument", m.b[at])
}

func (m *Machine) pop(at int) (any, error) {
	if len(m.stack) == 0 {
		return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: stack underflow", m.b[at])
	}
	v := m.stack[len(m.stack)-1]
	m.stack = m.stack[:len(m.stack)-1]
	m.slots--
	return v, nil
}

func (m *Machine) top(at int) (any, error) {
	if len(m.stack) == 0 {
		return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: stack underflow", m.b[at])
	}
	return m.stack[len(m.stack)-1], nil
}

// popN pops n values (in stack order) into a new slice.
func (m *Machine) popN(at, n int) ([]any, error) {
	if len(m.stack) < n {
		return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x: stack underflow", m.b[at])
	}
	items := append([]any(nil), m.stack[len(m.stack)-n:]...)
	clear(m.stack[len(m.stack)-n:])
	m.stack = m.stack[:len(m.stack)-n]
	m.slots -= int64(n)
	return items, m.step(at, int64(n))
}

func (m *Machine) popMark(at int) ([]any, error) {
	if len(m.marks) == 0 {
		return nil, m.fail(at, formats.ErrCorrupt, "opcode 0x%02x without MARK", m.b[at])
	}
	items := m.stack
	m.stack = m.marks[len(m.marks)-1]
	m.marks = m.marks[:len(m.marks)-1]
	m.slots -= int64(len(items))
	return items, m.step(at, int64(len(items)))
}

// popOnto pops the arguments of an opcode that adds them to the object
// below them (APPEND, SETITEM, ADDITEMS and their MARK forms): with mark
// every value above the topmost MARK, else n values; it returns them with
// that object, which stays on the stack.
func (m *Machine) popOnto(at, n int, mark bool) ([]any, any, error) {
	var items []any
	var err error
	if mark {
		items, err = m.popMark(at)
	} else {
		items, err = m.popN(at, n)
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := m.top(at)
	if err != nil {
		return nil, nil, err
	}
	return items, t, nil
}

func (m *Machine) memoPut(at int, i uint32) error {
	v, err := m.top(at)
	if err != nil {
		return err
	}
	if _, ok := m.memo[i]; !ok {
		if len(m.memo) >= m.opts.MaxMemo {
			return m.fail(at, formats.ErrLimit, "memo holds more than %d entries", m.opts.MaxMemo)
		}
		if err := m.charge(at, entryBytes); err != nil {
			return err
		}
	}
	m.memo[i] = v
	return nil
}

func (m *Machine) memoGet(at int, i uint32) error {
	v, ok := m.memo[i]
	if !ok {
		return m.fail(at, formats.ErrCorrupt, "memo entry %d is not set", i)
	}
	return m.push(at, v)
}

// newTuple builds a tuple, bounding its depth.
func (m *Machine) newTuple(at int, items []any) (*Tuple, error) {
	t := NewTuple(items...)
	if t.depth > m.opts.MaxDepth {
		return nil, m.fail(at, formats.ErrLimit, "tuples nested deeper than %d", m.opts.MaxDepth)
	}
	return t, m.charge(at, objectCost+slotCost*int64(len(items)))
}

func (m *Machine) keyID(at int, k any) (uint64, error) {
	id, err := m.keys.id(k)
	if err != nil {
		var u errUnhashable
		if errors.As(err, &u) {
			return 0, m.fail(at, formats.ErrCorrupt, "%v", err)
		}
		return 0, m.fail(at, formats.ErrLimit, "%v", err)
	}
	return id, nil
}

func (m *Machine) setItems(at int, d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return m.fail(at, formats.ErrCorrupt, "odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		id, err := m.keyID(at, items[i])
		if err != nil {
			return err
		}
		if d.keys == nil {
			d.keys = m.keys
		} else if d.keys != m.keys {
			return m.fail(at, formats.ErrCorrupt, "SETITEM on a dict built outside this pickle")
		}
		if d.put(id, items[i], items[i+1]) {
			if err := m.charge(at, entryBytes); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Machine) addItems(at int, s *Set, items []any) error {
	for _, v := range items {
		id, err := m.keyID(at, v)
		if err != nil {
			return err
		}
		if s.keys == nil {
			s.keys = m.keys
		} else if s.keys != m.keys {
			return m.fail(at, formats.ErrCorrupt, "ADDITEMS on a set built outside this pickle")
		}
		if s.add(id, v) {
			if err := m.charge(at, entryBytes); err != nil {
				return err
			}
		}
	}
	return nil
}

// global resolves GLOBAL/STACK_GLOBAL.
func (m *Machine) global(at int, mod, name string) (any, error) {
	if err := m.charge(at, objectCost); err != nil {
		return nil, err
	}
	var g *Global
	var err error
	if m.opts.Resolve != nil {
		g, err = m.opts.Resolve(mod, name)
	}
	if err == nil && g != nil {
		return g, nil
	}
	full := PrintableName(mod + "." + name)
	reason, class := "global "+full+" is not allowed", ErrRefused
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			reason = pe.Check
		} else {
			reason = err.Error()
		}
		class = classOf(err)
		if !errors.Is(class, formats.ErrUnsupported) {
			return nil, err
		}
	}
	o := &Opaque{Module: mod, Name: name, Offset: m.opts.Base + int64(at), Reason: reason}
	if m.unknown == nil {
		m.unknown, m.unknownErr, m.unknownClass = o, reason, class
	}
	return o, nil
}

// apply implements REDUCE, NEWOBJ and NEWOBJ_EX.
func (m *Machine) apply(at int, fn, args, kwargs any) (any, error) {
	t, ok := args.(*Tuple)
	if !ok {
		return nil, m.fail(at, formats.ErrCorrupt, "arguments are a %s, not a tuple", TypeName(args))
	}
	kw, ok := kwargs.(*Dict)
	if kwargs != nil && (!ok || kw.Class != "") {
		return nil, m.fail(at, formats.ErrCorrupt, "keyword arguments are a %s, not a dict", TypeName(kwargs))
	}
	// The callee sees the arguments and may copy them (one level):
	// that is charged as work and memory on every call.
	work, bytes := int64(len(t.Items)), int64(0)
	for _, a := range t.Items {
		switch x := a.(type) {
		case *Tuple:
			work += int64(len(x.Items))
		case *List:
			work += int64(len(x.Items))
		case *Dict:
			work += int64(len(x.Keys))
		case string:
			bytes += int64(len(x))
		case Bytes:
			bytes += int64(len(x))
		case ByteArray:
			bytes += int64(len(x))
		}
	}
	if err := m.step(at, work+bytes/64); err != nil {
		return nil, err
	}
	if err := m.charge(at, objectCost+slotCost*work+bytes); err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case *Opaque:
		o := &Opaque{Module: f.Module, Name: f.Name, Offset: f.Offset, Reason: f.Reason, Class: f, Called: true, Args: t.Items}
		if f.Class != nil {
			// Calling an object built from a placeholder: still opaque.
			o.Class = f.Class
		}
		if kw != nil && kw.Len() > 0 {
			o.Kwargs = kw
		}
		return o, nil
	case *Global:
		if kw != nil && kw.Len() > 0 {
			return nil, m.fail(at, formats.ErrUnsupported, "%s with keyword arguments", PrintableName(f.FullName()))
		}
		if f.Call == nil {
			return nil, m.fail(at, formats.ErrCorrupt, "global %s is not callable", PrintableName(f.FullName()))
		}
		v, err := f.Call(t.Items)
		if err != nil {
			var pe *Error
			var fe *formats.Error
			if errors.As(err, &pe) || errors.As(err, &fe) || isContext(err) {
				return nil, err
			}
			return nil, m.fail(at, classOf(err), "%s: %v", PrintableName(f.FullName()), err)
		}
		return v, nil
	}
	return nil, m.fail(at, formats.ErrCorrupt, "applying a %s", TypeName(fn))
}

// build implements BUILD.
func (m *Machine) build(at int, inst, state any) error {
	switch x := inst.(type) {
	case *Opaque:
		x.State = state
		return m.charge(at, slotCost)
	case *Dict:
		if emptyState(state) {
			return nil
		}
		sd, ok := state.(*Dict)
		if x.Class == "" || !ok {
			return m.fail(at, formats.ErrUnsupported, "BUILD of a %s with a %s state", TypeName(inst), TypeName(state))
		}
		if x.Attrs == nil {
			x.Attrs = &Dict{}
		}
		for _, k := range sd.Keys {
			if _, ok := k.(string); !ok {
				return m.fail(at, formats.ErrCorrupt, "BUILD: attribute name is a %s", TypeName(k))
			}
		}
		return m.setItems(at, x.Attrs, interleave(sd.Keys, sd.Vals))
	}
	if emptyState(state) {
		return nil
	}
	return m.fail(at, formats.ErrUnsupported, "BUILD of a %s with a %s state", TypeName(inst), TypeName(state))
}

func interleave(k, v []any) []any {
	out := make([]any, 0, 2*len(k))
	for i := range k {
		out = append(out, k[i], v[i])
	}
	return out
}

func emptyState(v any) bool {
	d, ok := v.(*Dict)
	return v == nil || ok && d.Len() == 0 && d.Attrs == nil
}

func leUint(p []byte) uint32 {
	var n uint32
	for i := len(p) - 1; i >= 0; i-- {
		n = n<<8 | uint32(p[i])
	}
	return n
}

// latin1 decodes Python 2 str bytes as Latin-1.
func latin1(p []byte) string {
	ascii := true
	for _, c := range p {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return string(p)
	}
	r := make([]rune, len(p))
	for i, c := range p {
		r[i] = rune(c)
	}
	return string(r)
}

// decodeLong decodes a two's-complement little-endian integer.
func decodeLong(p []byte) any {
	if len(p) == 0 {
		return int64(0)
	}
	if len(p) <= 8 {
		var v uint64
		for i := len(p) - 1; i >= 0; i-- {
			v = v<<8 | uint64(p[i])
		}
		shift := uint(64 - 8*len(p))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(p))
	for i := range p {
		be[len(p)-1-i] = p[i]
	}
	bi := new(big.Int).SetBytes(be)
	if p[len(p)-1]&0x80 != 0 {
		bi.Sub(bi, new(big.Int).Lsh(big.NewInt(1), uint(8*len(p))))
	}
	return NormInt(bi)
}

// maxIntDigits bounds text INT/LONG arguments and LONG1/LONG4 bytes.
const (
	maxIntDigits = 1000
	maxLongBytes = 1 << 12
)

func (m *Machine) textInt(at int, s []byte) (any, error) {
	str := string(s)
	switch str {
	case "01":
		return true, nil
	case "00":
		return false, nil
	}
	if n := len(str); n > 0 && str[n-1] == 'L' {
		str = str[:n-1]
	}
	if len(str) > maxIntDigits {
		return nil, m.fail(at, formats.ErrLimit, "integer of %d digits", len(str))
	}
	bi, ok := new(big.Int).SetString(str, 10)
	if !ok {
		return nil, m.fail(at, formats.ErrCorrupt, "malformed integer argument")
	}
	return NormInt(bi), nil
}

// exec runs one opcode (STOP is handled by run).
func (m *Machine) exec(op byte, at int) error {
	switch op {
	case 0x80: // PROTO
		p, err := m.need(at, 1)
		if err != nil {
			return err
		}
		if p[0] > 5 {
			return m.fail(at, formats.ErrUnsupported, "pickle protocol %d", p[0])
		}
	case 0x95: // FRAME: its opcodes follow inline
		_, err := m.lenArg(at, 8, false)
		return err
	case '(': // MARK
		if len(m.marks) >= m.opts.MaxMarks {
			return m.fail(at, formats.ErrLimit, "more than %d nested MARKs", m.opts.MaxMarks)
		}
		m.marks = append(m.marks, m.stack)
		m.stack = nil
		return m.charge(at, 3*slotCost)
	case '0': // POP
		if len(m.stack) == 0 {
			_, err := m.popMark(at)
			return err
		}
		_, err := m.pop(at)
		return err
	case '1': // POP_MARK
		_, err := m.popMark(at)
		return err
	case '2': // DUP
		v, err := m.top(at)
		if err != nil {
			return err
		}
		return m.push(at, v)
	case 'N':
		return m.push(at, nil)
	case 0x88:
		return m.push(at, true)
	case 0x89:
		return m.push(at, false)
	case 'J': // BININT
		p, err := m.need(at, 4)
		if err != nil {
			return err
		}
		return m.push(at, int64(int32(binary.LittleEndian.Uint32(p))))
	case 'K': // BININT1
		p, err := m.need(at, 1)
		if err != nil {
			return err
		}
		return m.push(at, int64(p[0]))
	case 'M': // BININT2
		p, err := m.need(at, 2)
		if err != nil {
			return err
		}
		return m.push(at, int64(binary.LittleEndian.Uint16(p)))
	case 0x8a, 0x8b: // LONG1, LONG4
		w := 1
		if op == 0x8b {
			w = 4
		}
		p, err := m.data(at, w, true)
		if err != nil {
			return err
		}
		if len(p) > maxLongBytes {
			return m.fail(at, formats.ErrLimit, "integer of %d bytes", len(p))
		}
		if err := m.charge(at, objectCost+int64(len(p))); err != nil {
			return err
		}
		return m.push(at, decodeLong(p))
	case 'I', 'L': // INT, LONG (text)
		s, err := m.line(at)
		if err != nil {
			return err
		}
		v, err := m.textInt(at, s)
		if err != nil {
			return err
		}
		return m.push(at, v)
	case 'G': // BINFLOAT
		p, err := m.need(at, 8)
		if err != nil {
			return err
		}
		return m.push(at, math.Float64frombits(binary.BigEndian.Uint64(p)))
	case 'F': // FLOAT (text)
		s, err := m.line(at)
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(string(s), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return m.fail(at, formats.ErrCorrupt, "malformed FLOAT argument")
		}
		return m.push(at, f)
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		w := map[byte]int{'X': 4, 0x8c: 1, 0x8d: 8}[op]
		p, err := m.data(at, w, false)
		if err != nil {
			return err
		}
		if !utf8.Valid(p) {
			return m.fail(at, formats.ErrCorrupt, "string is not valid UTF-8")
		}
		if err := m.charge(at, slotCost+int64(len(p))); err != nil {
			return err
		}
		return m.push(at, string(p))
	case 'U', 'T': // SHORT_BINSTRING, BINSTRING (Python 2 str, read as Latin-1)
		w := 1
		if op == 'T' {
			w = 4
		}
		p, err := m.data(at, w, true)
		if err != nil {
			return err
		}
		if err := m.charge(at, slotCost+2*int64(len(p))); err != nil {
			return err
		}
		return m.push(at, latin1(p))
	case 'S': // STRING (text, a quoted Python 2 str literal)
		s, err := m.line(at)
		if err != nil {
			return err
		}
		b, err := unquotePy(s)
		if err != nil {
			return m.fail(at, formats.ErrCorrupt, "malformed STRING argument: %v", err)
		}
		if err := m.charge(at, slotCost+2*int64(len(b))); err != nil {
			return err
		}
		return m.push(at, latin1(b))
	case 'V': // UNICODE (text, raw-unicode-escape)
		s, err := m.line(at)
		if err != nil {
			return err
		}
		str, err := rawUnicodeEscape(s)
		if err != nil {
			return m.fail(at, formats.ErrCorrupt, "malformed UNICODE argument: %v", err)
		}
		if err := m.charge(at, slotCost+int64(len(str))); err != nil {
			return err
		}
		return m.push(at, str)
	case 'C', 'B', 0x8e, 0x96: // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8
		w := map[byte]int{'C': 1, 'B': 4, 0x8e: 8, 0x96: 8}[op]
		p, err := m.data(at, w, false)
		if err != nil {
			return err
		}
		if err := m.charge(at, objectCost+int64(len(p))); err != nil {
			return err
		}
		if op == 0x96 {
			return m.push(at, ByteArray(append([]byte(nil), p...)))
		}
		return m.push(at, Bytes(append([]byte(nil), p...)))
	case ')':
		t, err := m.newTuple(at, nil)
		if err != nil {
			return err
		}
		return m.push(at, t)
	case 't':
		items, err := m.popMark(at)
		if err != nil {
			return err
		}
		t, err := m.newTuple(at, items)
		if err != nil {
			return err
		}
		return m.push(at, t)
	case 0x85, 0x86, 0x87: // TUPLE1..3
		items, err := m.popN(at, int(op-0x84))
		if err != nil {
			return err
		}
		t, err := m.newTuple(at, items)
		if err != nil {
			return err
		}
		return m.push(at, t)
	case ']':
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		return m.push(at, &List{})
	case 'l': // LIST
		items, err := m.popMark(at)
		if err != nil {
			return err
		}
		if err := m.charge(at, objectCost+slotCost*int64(len(items))); err != nil {
			return err
		}
		return m.push(at, &List{Items: items})
	case 'a', 'e': // APPEND, APPENDS
		items, t, err := m.popOnto(at, 1, op == 'e')
		if err != nil {
			return err
		}
		if err := m.charge(at, slotCost*int64(len(items))); err != nil {
			return err
		}
		switch l := t.(type) {
		case *List:
			l.Items = append(l.Items, items...)
		case *Opaque:
			l.Items = append(l.Items, items...)
		default:
			return m.fail(at, formats.ErrCorrupt, "APPEND to a %s", TypeName(t))
		}
	case '}':
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		return m.push(at, &Dict{})
	case 'd': // DICT
		items, err := m.popMark(at)
		if err != nil {
			return err
		}
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		d := &Dict{}
		if err := m.setItems(at, d, items); err != nil {
			return err
		}
		return m.push(at, d)
	case 's', 'u': // SETITEM, SETITEMS
		items, t, err := m.popOnto(at, 2, op == 'u')
		if err != nil {
			return err
		}
		switch d := t.(type) {
		case *Dict:
			return m.setItems(at, d, items)
		case *Opaque:
			if d.Entries == nil {
				d.Entries = &Dict{}
			}
			return m.setItems(at, d.Entries, items)
		}
		return m.fail(at, formats.ErrCorrupt, "SETITEM on a %s", TypeName(t))
	case 0x8f: // EMPTY_SET
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		return m.push(at, &Set{})
	case 0x90: // ADDITEMS
		items, t, err := m.popOnto(at, 0, true)
		if err != nil {
			return err
		}
		s, ok := t.(*Set)
		if !ok || s.Frozen {
			return m.fail(at, formats.ErrCorrupt, "ADDITEMS to a %s", TypeName(t))
		}
		return m.addItems(at, s, items)
	case 0x91: // FROZENSET
		items, err := m.popMark(at)
		if err != nil {
			return err
		}
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		s := &Set{Frozen: true}
		if err := m.addItems(at, s, items); err != nil {
			return err
		}
		return m.push(at, s)
	case 'c': // GLOBAL
		mod, err := m.line(at)
		if err != nil {
			return err
		}
		name, err := m.line(at)
		if err != nil {
			return err
		}
		if !utf8.Valid(mod) || !utf8.Valid(name) {
			return m.fail(at, formats.ErrCorrupt, "GLOBAL name is not valid UTF-8")
		}
		g, err := m.global(at, string(mod), string(name))
		if err != nil {
			return err
		}
		return m.push(at, g)
	case 0x93: // STACK_GLOBAL
		items, err := m.popN(at, 2)
		if err != nil {
			return err
		}
		mod, ok1 := items[0].(string)
		name, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return m.fail(at, formats.ErrCorrupt, "STACK_GLOBAL of a %s and a %s", TypeName(items[0]), TypeName(items[1]))
		}
		g, err := m.global(at, mod, name)
		if err != nil {
			return err
		}
		return m.push(at, g)
	case 'R', 0x81: // REDUCE, NEWOBJ
		items, err := m.popN(at, 2)
		if err != nil {
			return err
		}
		v, err := m.apply(at, items[0], items[1], nil)
		if err != nil {
			return err
		}
		return m.push(at, v)
	case 0x92: // NEWOBJ_EX
		items, err := m.popN(at, 3)
		if err != nil {
			return err
		}
		v, err := m.apply(at, items[0], items[1], items[2])
		if err != nil {
			return err
		}
		return m.push(at, v)
	case 'b': // BUILD
		state, err := m.pop(at)
		if err != nil {
			return err
		}
		inst, err := m.top(at)
		if err != nil {
			return err
		}
		return m.build(at, inst, state)
	case 'Q', 'P': // BINPERSID, PERSID
		var pid any
		if op == 'Q' {
			v, err := m.pop(at)
			if err != nil {
				return err
			}
			pid = v
		} else {
			s, err := m.line(at)
			if err != nil {
				return err
			}
			if err := m.charge(at, slotCost+int64(len(s))); err != nil {
				return err
			}
			pid = latin1(s)
		}
		if m.opts.Persistent == nil {
			return m.fail(at, formats.ErrCorrupt, "persistent id where none is allowed")
		}
		if err := m.charge(at, objectCost); err != nil {
			return err
		}
		v, err := m.opts.Persistent(pid)
		if err != nil {
			var pe *Error
			var fe *formats.Error
			if errors.As(err, &pe) || errors.As(err, &fe) || isContext(err) {
				return err
			}
			return m.fail(at, classOf(err), "persistent id: %v", err)
		}
		return m.push(at, v)
	case 'h', 'j': // BINGET, LONG_BINGET
		w := 1
		if op == 'j' {
			w = 4
		}
		p, err := m.need(at, w)
		if err != nil {
			return err
		}
		return m.memoGet(at, leUint(p))
	case 'q', 'r': // BINPUT, LONG_BINPUT
		w := 1
		if op == 'r' {
			w = 4
		}
		p, err := m.need(at, w)
		if err != nil {
			return err
		}
		return m.memoPut(at, leUint(p))
	case 'g', 'p': // GET, PUT (text)
		s, err := m.line(at)
		if err != nil {
			return err
		}
		i, err := strconv.ParseUint(string(s), 10, 32)
		if err != nil {
			return m.fail(at, formats.ErrCorrupt, "malformed memo index")
		}
		if op == 'g' {
			return m.memoGet(at, uint32(i))
		}
		return m.memoPut(at, uint32(i))
	case 0x94: // MEMOIZE
		return m.memoPut(at, uint32(len(m.memo)))
	case 'i', 'o', 0x82, 0x83, 0x84, 0x97, 0x98: // INST, OBJ, EXT1/2/4, NEXT_BUFFER, READONLY_BUFFER
		return m.fail(at, ErrRefused, "pickle opcode 0x%02x is not allowed", op)
	default:
		return m.fail(at, formats.ErrCorrupt, "unknown pickle opcode 0x%02x", op)
	}
	return nil
}
