package ztensor

import (
	"sort"
	"strconv"

	"github.com/snapd-ml/snapd/snapshot"
)

// maxArrayName is WTXT's limit on array names.
const maxArrayName = snapshot.MaxNameLen

// sanitize maps every byte outside WTXT's name alphabet to '_', truncates
// to max bytes and maps "" to "_".
func sanitize(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	b := []byte(s)
	for i, c := range b {
		if !snapshot.NameByte(c) {
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
		if t.format == formatDense && snapshot.PortableName(t.name) {
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
