package ztensor

import (
	"sort"
	"strconv"

	"github.com/snapd-ml/snapd/snapshot"
)

// maxArrayName is WTXT's limit on array names.
const maxArrayName = 1024

// legalName reports whether s matches ^[A-Za-z0-9_.:/-]{1,1024}$ and is not
// the reserved attrs array name.
func legalName(s string) bool {
	if len(s) == 0 || len(s) > maxArrayName || s == snapshot.AttrsArrayName {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !legalByte(s[i]) {
			return false
		}
	}
	return true
}

func legalByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == ':' || c == '/' || c == '-'
}

// sanitize maps every byte outside WTXT's name alphabet to '_', truncates
// to max bytes and maps "" to "_".
func sanitize(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	b := []byte(s)
	for i, c := range b {
		if !legalByte(c) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// assignNames gives every component a unique, WTXT-legal array name,
// deterministically from the manifest alone:
//
//  1. a dense tensor whose name is already legal (and not
//     "__snapd_attrs__") keeps it;
//  2. then, in ascending raw-byte order of tensor names, every other dense
//     tensor gets sanitize(name) and every component of a non-dense tensor
//     gets sanitize(name) + "." + sanitize(role) (in blob order); a
//     candidate already taken (or reserved) gets the first free suffix
//     "-2", "-3", ...
//
// Any array whose name differs from its tensor's carries the original in
// Attrs["ztensor.name"], so the assignment need not be invertible.
func assignNames(ts []*tensorInfo) {
	taken := map[string]bool{snapshot.AttrsArrayName: true}
	for _, t := range ts {
		if t.format == formatDense && legalName(t.name) {
			t.comps[0].arrayName = t.name
			taken[t.name] = true
		}
	}
	byName := append([]*tensorInfo(nil), ts...)
	sort.Slice(byName, func(i, j int) bool { return byName[i].name < byName[j].name })
	for _, t := range byName {
		for _, ci := range t.comps {
			if ci.arrayName != "" {
				continue
			}
			var cand string
			if t.format == formatDense {
				cand = sanitize(t.name, 1000)
			} else {
				cand = sanitize(t.name, 900) + "." + sanitize(ci.role, 99)
			}
			name := cand
			for i := 2; taken[name]; i++ {
				name = cand + "-" + strconv.Itoa(i)
			}
			ci.arrayName = name
			taken[name] = true
		}
	}
}
