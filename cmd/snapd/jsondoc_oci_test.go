package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

// jsonDocSectionsElsewhere are docs/JSON.md sections that
// TestJSONOutputMatchesDocs does not run: those needing a registry
// (TestOCIJSONMatchesDocs checks them) and the prose-only one.
var jsonDocSectionsElsewhere = map[string]bool{
	"`snapd oci push --json`":       true,
	"`snapd gc --remote --json`":    true,
	"Not covered by the table test": true, // ranks: prose only
}

// TestOCIJSONMatchesDocs runs `snapd oci push --json` (first push, then
// again with nothing to upload; identical segments are uploaded once) and `snapd gc --remote --json` (dry run,
// then for real) against docker-registry with basic auth and checks each
// document against docs/JSON.md; an unreachable registry gives the error
// object.
func TestOCIJSONMatchesDocs(t *testing.T) {
	specs := jsonDocSpecs(t)
	const user, pass = "ci", "pw-for-the-json-test"
	reg := registrytest.Start(t, user, pass)
	t.Setenv("SNAPD_OCI_USERNAME", user) // run() reads the process environment
	t.Setenv("SNAPD_OCI_PASSWORD", pass)
	t.Setenv("HOME", t.TempDir())
	d := t.TempDir()
	repo := reg.Host + "/snapd/jsondoc"
	var ins []string
	for _, v := range []string{"v2-ext-signed.wtxt", "v1-basic-signed.wtxt"} { // gen 7, gen 124
		b, err := os.ReadFile(filepath.Join(vectors, v))
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(d, v)
		os.WriteFile(in, b, 0o644)
		ins = append(ins, in)
	}
	type jrun struct {
		section string
		args    []string
		code    int
		check   func(doc map[string]any) error
	}
	num := func(doc map[string]any, k string) float64 { f, _ := doc[k].(float64); return f }
	runs := []jrun{
		{"`snapd oci push --json`", []string{"oci", "push", "--json", ins[0], "--oci-repository", repo, "--segment-size", "65536"}, 0, func(doc map[string]any) error {
			if doc["tag"] != "gen-000007" || doc["skeleton"] != ins[0]+".skel" || num(doc, "segments") < 2 || num(doc, "uploaded") < 1 || num(doc, "uploaded") > num(doc, "segments") ||
				num(doc, "segment_size") != 65536 || !strings.HasPrefix(fmt.Sprint(doc["manifest"]), "sha256:") || doc["repository"] != repo {
				return fmt.Errorf("values")
			}
			return nil
		}},
		{"`snapd oci push --json`", []string{"oci", "push", "--json", ins[0], "--oci-repository", repo, "--segment-size", "65536"}, 0, func(doc map[string]any) error {
			if num(doc, "uploaded") != 0 || num(doc, "skipped") < 1 || num(doc, "skipped_bytes") == 0 {
				return fmt.Errorf("re-push uploaded again")
			}
			return nil
		}},
		{"`snapd oci push --json`", []string{"oci", "push", "--json", ins[1], "--oci-repository", repo}, 0, nil},
		{"`snapd gc --remote --json`", []string{"gc", "--remote", "--json", "--dry-run", "--keep", "1", "--oci-repository", repo}, 0, func(doc map[string]any) error {
			if fmt.Sprint(doc["removed"]) != "[gen-000007]" || doc["dry_run"] != true {
				return fmt.Errorf("values")
			}
			return nil
		}},
		{"`snapd gc --remote --json`", []string{"gc", "--remote", "--json", "--keep", "1", "--oci-repository", repo}, 0, func(doc map[string]any) error {
			if fmt.Sprint(doc["removed"]) != "[gen-000007]" || doc["dry_run"] != false {
				return fmt.Errorf("values")
			}
			return nil
		}},
		{"`snapd gc --remote --json`", []string{"gc", "--remote", "--json", "--keep", "1", "--oci-repository", repo}, 0, func(doc map[string]any) error {
			if a, ok := doc["removed"].([]any); !ok || len(a) != 0 {
				return fmt.Errorf("removed is not []")
			}
			return nil
		}},
		{"Errors (`\"error\"`)", []string{"oci", "push", "--json", ins[0], "--oci-repository", "127.0.0.1:1/none/here"}, 2, func(doc map[string]any) error {
			if e, _ := doc["error"].(map[string]any); e["code"] != "io" || e["hint"] == nil {
				return fmt.Errorf("not an io error with a hint")
			}
			return nil
		}},
		{"Errors (`\"error\"`)", []string{"gc", "--remote", "--json", "--keep", "0", "--oci-repository", repo}, 2, nil},
	}
	for i, r := range runs {
		spec, ok := specs[r.section]
		if !ok {
			t.Fatalf("docs/JSON.md has no section %q", r.section)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), r.args, &out, &errb)
		name := fmt.Sprintf("run %d (%s)", i, strings.Join(r.args[:3], " "))
		if code != r.code {
			t.Fatalf("%s: exit %d, want %d\n%s%s", name, code, r.code, out.String(), errb.String())
		}
		if strings.Contains(out.String()+errb.String(), pass) {
			t.Fatalf("%s: password in output", name)
		}
		var doc map[string]any
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: stdout is not one JSON object: %v", name, err)
		}
		if dec.More() {
			t.Fatalf("%s: more than one JSON document on stdout", name)
		}
		checkAgainstSpec(t, name, doc, spec)
		if r.check != nil {
			if err := r.check(doc); err != nil {
				t.Errorf("%s: %v: %v", name, err, doc)
			}
		}
	}
}
