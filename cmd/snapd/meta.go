package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// requestMeta builds a request's metadata from --meta KEY=VALUE flags and
// --meta-json: each VALUE a JSON scalar or else a string
// (snapshot.ParseUserMetaValue); the limits of snapshot.UserMeta apply to
// the union, and a key may be given once.
func requestMeta(pairs []string, js string) (snapshot.UserMeta, error) {
	var entries []snapshot.MetaEntry
	if js != "" {
		m, err := snapshot.ParseUserMeta([]byte(js))
		if err != nil {
			return nil, fmt.Errorf("--meta-json: %w", err)
		}
		entries = append(entries, m...)
	}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--meta %q: want KEY=VALUE", p)
		}
		val, err := snapshot.ParseUserMetaValue(k, v)
		if err != nil {
			return nil, fmt.Errorf("--meta: %w", err)
		}
		entries = append(entries, snapshot.MetaEntry{Key: k, Value: val})
	}
	m, err := snapshot.BuildUserMeta(entries)
	if err != nil {
		return nil, fmt.Errorf("--meta: %w", err)
	}
	return m, nil
}

// metaChangeJSON is one changed metadata key in `snapd diff --json`: old
// and new are the JSON values, absent on the side without the key.
type metaChangeJSON struct {
	Key string          `json:"key"`
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
}

func metaChangesJSON(cs []snapshot.MetaChange) []metaChangeJSON {
	var out []metaChangeJSON
	for _, c := range cs {
		j := metaChangeJSON{Key: c.Key}
		if c.Old != "" {
			j.Old = json.RawMessage(c.Old)
		}
		if c.New != "" {
			j.New = json.RawMessage(c.New)
		}
		out = append(out, j)
	}
	return out
}

// writeMetaChanges lists changed metadata keys, one line each:
// "meta: KEY OLD -> NEW", "meta: KEY added NEW", "meta: KEY removed (was OLD)".
func writeMetaChanges(w io.Writer, cs []snapshot.MetaChange) {
	for _, c := range cs {
		switch {
		case c.Old == "":
			fmt.Fprintf(w, "meta: %s added %s\n", c.Key, c.New)
		case c.New == "":
			fmt.Fprintf(w, "meta: %s removed (was %s)\n", c.Key, c.Old)
		default:
			fmt.Fprintf(w, "meta: %s %s -> %s\n", c.Key, c.Old, c.New)
		}
	}
}
