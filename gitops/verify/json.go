package verify

import (
	"encoding/json"
	"strconv"
)

// JSON (snapd verify-repo --json, docs/JSON.md): every generation number
// is a JSON number — "gen" (0 when the commit names none), "after",
// "before" — with the padded form as written in the snapshot beside it
// ("gen_text", "after_text", "before_text"). The Go fields keep the text.

// genNumber parses a generation as written ("000123"); 0 when it is not
// one (a commit without the trailer).
func genNumber(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// MarshalJSON writes gen as a number and gen_text as written.
func (g *Generation) MarshalJSON() ([]byte, error) {
	type plain Generation
	return json.Marshal(struct {
		*plain
		Gen     uint64 `json:"gen"`
		GenText string `json:"gen_text"`
	}{(*plain)(g), genNumber(g.Gen), g.Gen})
}

// MarshalJSON writes gen as a number and gen_text as written (both
// absent when the failure concerns no generation).
func (f Failure) MarshalJSON() ([]byte, error) {
	type plain Failure
	out := struct {
		plain
		Gen     *uint64 `json:"gen,omitempty"`
		GenText string  `json:"gen_text,omitempty"`
	}{plain: plain(f), GenText: f.Gen}
	if f.Gen != "" {
		n := genNumber(f.Gen)
		out.Gen = &n
	}
	return json.Marshal(out)
}

// MarshalJSON writes after and before as numbers, with their text.
func (g Gap) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		After      uint64 `json:"after"`
		AfterText  string `json:"after_text"`
		Before     uint64 `json:"before"`
		BeforeText string `json:"before_text"`
		Missing    uint64 `json:"missing"`
	}{genNumber(g.After), g.After, genNumber(g.Before), g.Before, g.Missing})
}
