package dcp

import (
	"bytes"
	"encoding/binary"
)

// pickler writes the .metadata pickle: protocol 2 opcodes only (every
// Python 3 unpickler reads them), globals memoised, no other memo.
type pickler struct {
	buf     bytes.Buffer
	globals map[string]uint32
}

func (p *pickler) op(b ...byte) { p.buf.Write(b) }

// global pushes module.name (GLOBAL the first time, then LONG_BINGET).
func (p *pickler) global(module, name string) {
	k := module + "\n" + name + "\n"
	if id, ok := p.globals[k]; ok {
		p.op('j')
		p.u32(id)
		return
	}
	if p.globals == nil {
		p.globals = map[string]uint32{}
	}
	id := uint32(len(p.globals))
	p.globals[k] = id
	p.op('c')
	p.buf.WriteString(k)
	p.op('r')
	p.u32(id)
}

func (p *pickler) u32(v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	p.buf.Write(b[:])
}

func (p *pickler) str(s string) {
	p.op('X')
	p.u32(uint32(len(s)))
	p.buf.WriteString(s)
}

func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.op('K', byte(v))
	case v >= 0 && v < 1<<16:
		p.op('M', byte(v), byte(v>>8))
	case v >= -1<<31 && v < 1<<31:
		p.op('J')
		p.u32(uint32(int32(v)))
	default:
		// LONG1: little-endian two's complement, shortest form.
		var b []byte
		for x := v; ; x >>= 8 {
			b = append(b, byte(x))
			if (x >= -128 && x < 128) && (x < 0) == (byte(x)&0x80 != 0) {
				break
			}
		}
		p.op(0x8a, byte(len(b)))
		p.buf.Write(b)
	}
}

func (p *pickler) bool(v bool) {
	if v {
		p.op(0x88)
	} else {
		p.op(0x89)
	}
}

func (p *pickler) none() { p.op('N') }

// tuple pushes a tuple of what the calls in fn push.
func (p *pickler) tuple(fn func()) {
	p.op('(')
	fn()
	p.op('t')
}

// size pushes torch.Size(dims).
func (p *pickler) size(dims []int64) {
	p.global("torch", "Size")
	p.tuple(func() {
		for _, d := range dims {
			p.int(d)
		}
	})
	p.op(0x85, 'R') // TUPLE1 (the args), REDUCE
}

// object pushes module.name() (NEWOBJ with no arguments), as pickle
// does for a dataclass; state, when set, pushes what BUILD gives it.
func (p *pickler) object(module, name string, state func()) {
	p.global(module, name)
	p.op(')', 0x81) // EMPTY_TUPLE, NEWOBJ
	if state != nil {
		state()
		p.op('b') // BUILD
	}
}

// dict pushes a dict of the pairs fn pushes (key, value, key, value...).
func (p *pickler) dict(fn func()) {
	p.op('}', '(')
	fn()
	p.op('u')
}

// list pushes a list of what fn pushes.
func (p *pickler) list(fn func()) {
	p.op(']', '(')
	fn()
	p.op('e')
}
