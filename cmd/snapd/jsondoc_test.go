package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// fieldSpec is one documented field of docs/JSON.md.
type fieldSpec struct {
	types    []string // string, number, bool, object, array, map, list, null
	optional bool
}

// jsonDocSpecs parses docs/JSON.md: "## heading" sections, each with a
// table of | `path` | type | notes | rows.
func jsonDocSpecs(t *testing.T) map[string]map[string]fieldSpec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "JSON.md"))
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]map[string]fieldSpec{}
	var cur map[string]fieldSpec
	for _, l := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			cur = map[string]fieldSpec{}
			specs[h] = cur
			continue
		}
		if cur == nil || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(l, `\|`, "\x00"), "|")
		if len(cells) < 4 {
			t.Fatalf("JSON.md: bad row %q", l)
		}
		path := strings.Trim(strings.TrimSpace(cells[1]), "`")
		typ := strings.ReplaceAll(strings.TrimSpace(cells[2]), "\x00", "|")
		fs := fieldSpec{optional: strings.HasSuffix(typ, "?")}
		fs.types = strings.Split(strings.TrimSuffix(typ, "?"), "|")
		for _, x := range fs.types {
			if !slices.Contains([]string{"string", "number", "bool", "object", "array", "map", "list", "null"}, x) {
				t.Fatalf("JSON.md: %s: unknown type %q", path, x)
			}
		}
		if _, dup := cur[path]; dup {
			t.Fatalf("JSON.md: %s listed twice", path)
		}
		cur[path] = fs
	}
	return specs
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// checkAgainstSpec checks doc (decoded into map[string]any) against spec:
// every field documented with its type, required ones present.
func checkAgainstSpec(t *testing.T, name string, doc map[string]any, spec map[string]fieldSpec) {
	t.Helper()
	var walk func(obj map[string]any, path string)
	walk = func(obj map[string]any, path string) {
		join := func(k string) string {
			if path == "" {
				return k
			}
			return path + "." + k
		}
		for p, fs := range spec { // required members of this object
			parent, key := "", p
			if i := strings.LastIndex(p, "."); i >= 0 {
				parent, key = p[:i], p[i+1:]
			}
			if parent == path && !fs.optional {
				if _, ok := obj[key]; !ok {
					t.Errorf("%s: required field %s missing", name, p)
				}
			}
		}
		for k, v := range obj {
			p := join(k)
			fs, ok := spec[p]
			if !ok {
				t.Errorf("%s: field %s (%s) is not in docs/JSON.md", name, p, jsonType(v))
				continue
			}
			got := jsonType(v)
			want := fs.types
			if slices.Contains(want, "map") && got == "object" || slices.Contains(want, "list") && got == "array" {
				continue
			}
			if !slices.Contains(want, got) {
				t.Errorf("%s: field %s is %s, docs/JSON.md says %v", name, p, got, want)
				continue
			}
			switch x := v.(type) {
			case map[string]any:
				walk(x, p)
			case []any:
				for _, el := range x {
					if m, ok := el.(map[string]any); ok {
						walk(m, p+"[]")
					}
				}
			}
		}
	}
	walk(doc, "")
}

// TestJSONOutputMatchesDocs runs every command with --json on real state
// (the demo's: daemon, ring, WAL, Git; plus a push queue, a sealed file, a
// damaged file and a repository with a gap and a broken chain) and checks
// each document against docs/JSON.md.
func TestJSONOutputMatchesDocs(t *testing.T) {
	t.Parallel()
	specs := jsonDocSpecs(t)
	ctx := context.Background()
	// The state is a copy of the shared demo's (3 generations): a demo
	// run of its own would encode, hash and commit a 3 MiB model per
	// generation again (seconds of CPU under the race detector) for the
	// same kind of state. The copy gets the push queue; the keys are read
	// from the shared demo, untouched.
	_, demoDir := shared.demo(t)
	d := filepath.Join(t.TempDir(), "demo")
	if err := os.CopyFS(d, os.DirFS(demoDir)); err != nil {
		t.Fatal(err)
	}
	p := func(rel string) string { return filepath.Join(d, rel) }
	// A push queue with one job (as the daemon keeps it with a remote).
	q, err := queue.Open(p("push-queue"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(verifytest.Git(t, p("repo"), "rev-parse", "snapshots"))
	if err := q.Enqueue(queue.Job{Branch: "snapshots", Gen: 3, Commit: head, Tag: "gen-000003", Enqueued: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// A sealed (age-armored) generation and a damaged one.
	keys := filepath.Join(demoDir, "keys")
	if code, _, errs := snapd(t, nil, "convert", p("gens/gen-000001.safetensors"), p("sealed.wtxt"), "--encrypt-to", filepath.Join(keys, "age.pub"), "--sign-key", filepath.Join(keys, "sign_ed25519")); code != 0 {
		t.Fatalf("convert --encrypt-to: %s", errs)
	}
	good, _ := os.ReadFile(p("ring/gen-000002.wtxt"))
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 1
	os.WriteFile(p("bad.wtxt"), bad, 0o644)
	// Repositories with a gap and with a broken chain.
	gap := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 4}})
	f := verifytest.Build(t, verifytest.Options{})
	broken, _ := brokenChainCopy(t, f)

	type jrun struct {
		section string
		args    []string
		code    int
	}
	pub := filepath.Join(keys, "allowed_signers")
	runs := []jrun{
		{"`snapd version --json`", []string{"version", "--json"}, 0},
		{"`snapd verify --json`", []string{"verify", "--json", p("ring/gen-000002.wtxt"), "--pubkey", pub, "--prev", p("ring/gen-000001.wtxt")}, 0},
		{"`snapd verify --json`", []string{"verify", "--json", p("bad.wtxt"), "--pubkey", pub}, 1},
		{"`snapd verify --json`", []string{"verify", "--json", p("sealed.wtxt"), "--pubkey", pub, "--identity", filepath.Join(keys, "age.key")}, 0},
		{"`snapd inspect --json` (a WTXT file)", []string{"inspect", "--json", p("ring/gen-000002.wtxt")}, 0},
		{"`snapd inspect --json` (another format)", []string{"inspect", "--json", p("gens/gen-000001.safetensors")}, 0},
		{"`snapd inspect --json` (another format)", []string{"inspect", "--json", p("gens/gen-000002.zt")}, 0},
		{"`snapd inspect --json` (a `.wtxtdelta`)", []string{"inspect", "--json", p("ring/gen-000002.wtxtdelta")}, 0},
		{"`snapd inspect --json` (a `.wtxtdelta`)", []string{"inspect", "--json", filepath.Join(deltaTestdata, "short.wtxtdelta")}, 0},
		{"`snapd diff --json`", []string{"diff", "--json", p("ring/gen-000001.wtxt"), p("ring/gen-000002.wtxt")}, 1},
		{"`snapd status --json`", []string{"status", "--json", "--state-dir", d}, 0},
		{"`snapd queue list --json`", []string{"queue", "list", "--json", "--state-dir", d}, 0},
		{"`snapd wal list --json`", []string{"wal", "list", "--json", "--state-dir", d}, 0},
		{"`snapd gc --json`", []string{"gc", "--json", "--dry-run", "--keep", "1", "--state-dir", d}, 0},
		{"`snapd verify-repo --json`", []string{"verify-repo", "--json", p("repo"), "--pubkey", pub}, 0},
		{"`snapd log --json`", []string{"log", "--json", "--repo", p("repo")}, 0},
		{"`snapd verify-repo --json`", []string{"verify-repo", "--json", gap.Dir, "--pubkey", gap.Key.AllowedSigners}, 0},
		{"`snapd verify-repo --json`", []string{"verify-repo", "--json", broken, "--pubkey", f.Key.AllowedSigners}, 1},
		{"Errors (`\"error\"`)", []string{"status", "--json", "--state-dir", p("no-such-dir")}, 2},
		{"Errors (`\"error\"`)", []string{"inspect", "--json", p("bad.wtxt")}, 1},
		{"Errors (`\"error\"`)", []string{"verify", "--json", "--no-such-flag", p("bad.wtxt")}, 2},
		{"Errors (`\"error\"`)", []string{"convert", "--json", "x", "y"}, 2},
	}
	seen := map[string]bool{}
	for i, r := range runs {
		spec, ok := specs[r.section]
		if !ok {
			t.Fatalf("docs/JSON.md has no section %q", r.section)
		}
		seen[r.section] = true
		var out, errb bytes.Buffer
		code := run(ctx, r.args, &out, &errb)
		name := fmt.Sprintf("run %d (%s)", i, strings.Join(r.args[:2], " "))
		if code != r.code {
			t.Errorf("%s: exit %d, want %d\n%s", name, code, r.code, errb.String())
			continue
		}
		var doc map[string]any
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&doc); err != nil {
			t.Errorf("%s: stdout is not one JSON object: %v", name, err)
			continue
		}
		if dec.More() {
			t.Errorf("%s: more than one JSON document on stdout", name)
		}
		checkAgainstSpec(t, name, doc, spec)
		if r.code != 0 && !strings.Contains(errb.String(), "snapd: error: ") && r.section == "Errors (`\"error\"`)" {
			t.Errorf("%s: no human error line on stderr: %q", name, errb.String())
		}
	}
	// Spot checks of values the types alone do not show.
	var out, errb bytes.Buffer
	run(ctx, []string{"status", "--json", "--state-dir", d}, &out, &errb)
	var st struct {
		Chain struct {
			Gen     any    `json:"gen"`
			GenText string `json:"gen_text"`
		} `json:"chain"`
		Queue struct{ Pending int } `json:"queue"`
	}
	if json.Unmarshal(out.Bytes(), &st) != nil || st.Chain.Gen != float64(3) || st.Chain.GenText != "000003" || st.Queue.Pending != 1 {
		t.Errorf("status: %s", out.String())
	}
	out.Reset()
	run(ctx, []string{"inspect", "--json", p("bad.wtxt")}, &out, &errb)
	var ej errorJSON
	if json.Unmarshal(out.Bytes(), &ej) != nil || ej.Error.Code != "invalid" || ej.Error.Where.File == "" || ej.Error.Where.Line == 0 ||
		ej.Error.Where.Check == "" || ej.Error.Where.Array == "" || ej.Error.Where.Chunk == nil {
		t.Errorf("error object lacks where: %s", out.String())
	}
	for h := range specs {
		if !seen[h] && !jsonDocSectionsElsewhere[h] {
			t.Errorf("docs/JSON.md section %q is not exercised by this test", h)
		}
	}
}
