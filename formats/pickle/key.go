package pickle

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unsafe"
)

// keyer gives every hashable value an identity: a number equal for
// values Python finds equal as dict keys (1 == 1.0 == True, equal
// strings, equal tuples) and different otherwise. Identities are
// interned, so the cost of a key is paid once per object, not per use:
//
//   - a string (or bytes) object is recognised by its data pointer and
//     length, so a memoized 4 MB string used as a key a million times is
//     hashed once;
//   - a tuple caches its identity, computed from its items' identities
//     (a fixed 8 bytes each): linear in its length, never in its depth;
//   - a tuple's depth is bounded when it is built, so computing identities
//     recurses at most that deep.
//
// cost accumulates the bytes of the tables' new entries, for the
// machine's budget.
type keyer struct {
	next     uint64
	maxDepth int
	cost     int64
	scalars  map[string]uint64 // None, ints, floats: a short canonical form
	strs     map[string]uint64 // string content
	strObj   map[objKey]uint64 // string object (data pointer, length)
	byts     map[string]uint64 // bytes content
	bytsObj  map[objKey]uint64
	tuples   map[string]uint64 // tuple: its items' identities
	objs     map[any]uint64    // *big.Int, *Global, *Opaque by pointer
	buf      []byte
}

type objKey struct {
	p *byte
	n int
}

// keyCache is a tuple's identity under one keyer.
type keyCache struct {
	k  *keyer
	id uint64
}

// entryCost is what one table entry is charged (map bucket share, the
// key's header, the value).
const entryCost = 64

func newKeyer(maxDepth int) *keyer {
	return &keyer{
		maxDepth: maxDepth,
		scalars:  map[string]uint64{}, strs: map[string]uint64{}, strObj: map[objKey]uint64{},
		byts: map[string]uint64{}, bytsObj: map[objKey]uint64{}, tuples: map[string]uint64{}, objs: map[any]uint64{},
	}
}

func (k *keyer) intern(m map[string]uint64, s string) uint64 {
	if id, ok := m[s]; ok {
		return id
	}
	k.next++
	m[s] = k.next
	k.cost += entryCost + int64(len(s))
	return k.next
}

// errUnhashable is the failure of id for a value Python cannot hash (or
// this package does not compare).
type errUnhashable struct{ typ string }

func (e errUnhashable) Error() string { return "unhashable key of type " + e.typ }

// id returns v's identity or an error when v is unhashable.
func (k *keyer) id(v any) (uint64, error) {
	switch x := v.(type) {
	case nil:
		return k.intern(k.scalars, "N"), nil
	case bool:
		if x {
			return k.intern(k.scalars, "i1"), nil
		}
		return k.intern(k.scalars, "i0"), nil
	case int64:
		return k.intern(k.scalars, "i"+strconv.FormatInt(x, 10)), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return k.intern(k.scalars, "i"+strconv.FormatInt(int64(x), 10)), nil
		}
		return k.intern(k.scalars, "f"+strconv.FormatFloat(x, 'g', -1, 64)), nil
	case complex128:
		if imag(x) == 0 {
			return k.id(real(x))
		}
		return k.intern(k.scalars, "c"+strconv.FormatComplex(x, 'g', -1, 128)), nil
	case *big.Int:
		if id, ok := k.objs[x]; ok {
			return id, nil
		}
		id := k.intern(k.scalars, "i"+x.String())
		k.objs[x] = id
		k.cost += entryCost
		return id, nil
	case string:
		o := objKey{unsafe.StringData(x), len(x)}
		if id, ok := k.strObj[o]; ok {
			return id, nil
		}
		id := k.intern(k.strs, x)
		k.strObj[o] = id
		k.cost += entryCost
		return id, nil
	case Bytes:
		o := objKey{unsafe.SliceData(x), len(x)}
		if id, ok := k.bytsObj[o]; ok {
			return id, nil
		}
		id := k.intern(k.byts, string(x))
		k.bytsObj[o] = id
		k.cost += entryCost
		return id, nil
	case *Global, *Opaque:
		if id, ok := k.objs[x]; ok {
			return id, nil
		}
		k.next++
		k.objs[x] = k.next
		k.cost += entryCost
		return k.next, nil
	case *Tuple:
		return k.tupleID(x)
	}
	return 0, errUnhashable{TypeName(v)}
}

func (k *keyer) tupleID(t *Tuple) (uint64, error) {
	if t.key.k == k {
		return t.key.id, nil
	}
	if t.depth > k.maxDepth {
		return 0, fmt.Errorf("tuple key nested %d deep, deeper than %d", t.depth, k.maxDepth)
	}
	// Items first (each tuple among them caches its own identity), then
	// this tuple's encoding: 8 bytes per item.
	ids := make([]uint64, len(t.Items))
	for i, e := range t.Items {
		id, err := k.id(e)
		if err != nil {
			return 0, err
		}
		ids[i] = id
	}
	k.buf = append(k.buf[:0], 't')
	for _, id := range ids {
		k.buf = binary.LittleEndian.AppendUint64(k.buf, id)
	}
	id := k.intern(k.tuples, string(k.buf))
	t.key = keyCache{k, id}
	return id, nil
}
