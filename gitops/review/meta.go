package review

import (
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// MetaTable is the Markdown table of two generations' metadata
// (snapshot.UserMeta): one row per key of either side in key order,
// old → new, changed keys in bold; "" when neither side has metadata.
// The review body and `snapd diff --markdown` show it.
func MetaTable(old, new snapshot.UserMeta) string {
	if len(old) == 0 && len(new) == 0 {
		return ""
	}
	changed := map[string]bool{}
	for _, c := range snapshot.DiffUserMeta(old, new) {
		changed[c.Key] = true
	}
	var b strings.Builder
	b.WriteString("| metadata | old | new |\n|---|---|---|\n")
	cell := func(m snapshot.UserMeta, k string) string {
		if v, ok := m.Get(k); ok {
			return "`" + mdSafe(v) + "`"
		}
		return "—"
	}
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		var k string
		switch {
		case j == len(new) || i < len(old) && old[i].Key < new[j].Key:
			k = old[i].Key
			i++
		case i == len(old) || new[j].Key < old[i].Key:
			k = new[j].Key
			j++
		default:
			k = old[i].Key
			i++
			j++
		}
		name := "`" + k + "`"
		if changed[k] {
			name = "**" + name + "**"
		}
		b.WriteString("| " + name + " | " + cell(old, k) + " | " + cell(new, k) + " |\n")
	}
	return b.String()
}
