package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
)

// legacyJob is a job file as the format before Publish.State wrote it: the
// OCI publisher's progress as keys of publish (here after its upload,
// before its commit), with its held WTXT and skeleton in hold/.
const legacyJob = `{"branch":"snapshots","gen":3,"commit":"","enqueued":"2024-05-01T10:00:00Z","attempts":2,"last_error":"git: disk full",` +
	`"next_attempt":"2024-05-01T10:00:04Z","publish":{"kind":"oci-generation","wtxt":%q,"bytes":5,` +
	`"header":{"gen":3,"root":{"gen":"000003","ts":"2024-05-01T09:59:59Z","build":"b","sha256_all":"%s","merkle_prev":"%s","merkle_this":"%s"}},` +
	`"repository":"registry.example:5000/snapd/unit","manifest":"sha256:%s","skeleton":%q,"uploaded_bytes":5,"skipped_bytes":0,` +
	`"requested":"2024-05-01T09:59:58Z"}}` + "\n"

// stateReader is a Publisher of the legacy state's shape: it commits
// from the state it reads back, as the OCI publisher does.
type stateReader struct{ saw map[string]any }

func (p *stateReader) Publish(_ context.Context, j Job, _ func(Job) error) (Job, error) {
	if err := json.Unmarshal(j.Publish.State, &p.saw); err != nil {
		return j, err
	}
	j.Commit, j.Tag = commitOf(int(j.Gen)), "gen-000003"
	return j, nil
}

// TestPublishLegacyJobFile: a job file of the format before State loads:
// its progress keys become State unchanged (the Publisher reads the
// manifest it recorded, so the upload is not repeated), its bytes count
// as sent, the job resumes and, once done, its held files are released;
// a file mixing State and a legacy key is corrupt.
func TestPublishLegacyJobFile(t *testing.T) {
	qdir := t.TempDir()
	hold := filepath.Join(qdir, holdDir)
	jdir := filepath.Join(qdir, jobsDir, "snapshots")
	for _, d := range []string{hold, jdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wtxtPath := filepath.Join(hold, "snapshots@00000000000000000003.wtxt")
	skel := wtxtPath + ".skel"
	for _, p := range []string{wtxtPath, skel} {
		if err := os.WriteFile(p, []byte("bytes"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hex := strings.Repeat("ab", 32)
	body := fmt.Sprintf(legacyJob, wtxtPath, hex, hex, hex, strings.Repeat("cd", 32), skel)
	if err := os.WriteFile(filepath.Join(jdir, "00000000000000000003.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := &fakePusher{}
	pub := &stateReader{}
	q, err := Open(qdir, Options{Pusher: fp, Publisher: pub, Clock: newFakeClock(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := q.List()
	if err != nil || len(jobs) != 1 {
		t.Fatalf("legacy job file: %v %+v", err, jobs)
	}
	p := jobs[0].Publish
	want := fmt.Sprintf(`{"repository":"registry.example:5000/snapd/unit","manifest":"sha256:%s","skeleton":%q,"uploaded_bytes":5,"skipped_bytes":0}`, strings.Repeat("cd", 32), skel)
	if string(p.State) != want || !p.Sent || p.Kind != "oci-generation" || p.Bytes != 5 || p.Header == nil || p.Header.Gen != 3 || p.Requested.IsZero() || jobs[0].Attempts != 2 {
		t.Fatalf("legacy publish read as %+v, state %s; want state %s", p, p.State, want)
	}
	if st, _ := q.Status(); st.Publishing != 1 || st.PublishPendingBytes != 0 {
		t.Fatalf("status of an uploaded legacy job: %+v", st)
	}
	// Open's sweep kept the held files; the job resumes from its state.
	if _, err := os.Stat(skel); err != nil {
		t.Fatalf("the legacy job's skeleton was swept: %v", err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pub.saw["manifest"] != "sha256:"+strings.Repeat("cd", 32) || len(fp.calls) != 1 {
		t.Fatalf("publisher saw %v, pushes %v", pub.saw, fp.calls)
	}
	if es, _ := os.ReadDir(hold); len(es) != 0 {
		t.Fatalf("held files left: %v", es)
	}

	// Before its upload, a legacy job has no progress keys: no state,
	// its bytes pending.
	var before Publish
	if err := json.Unmarshal([]byte(`{"kind":"oci-generation","wtxt":"/h/x.wtxt","bytes":7}`), &before); err != nil || before.Sent || before.State != nil {
		t.Fatalf("legacy job before upload: %+v %v", before, err)
	}
	// Unknown keys, and State beside a legacy key, are refused.
	for _, bad := range []string{`{"kind":"k","wtxt":"/h/x.wtxt","bytes":7,"other":1}`, `{"kind":"k","wtxt":"/h/x.wtxt","bytes":7,"state":{},"manifest":"m"}`} {
		var p Publish
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if err := os.WriteFile(filepath.Join(jdir, "00000000000000000004.json"), []byte(`{"branch":"snapshots","gen":4,"commit":"","enqueued":"2024-05-01T10:00:00Z","attempts":0,"publish":{"kind":"k","wtxt":"/h/x.wtxt","bytes":7,"state":{},"manifest":"m"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := q.List(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("job file with state and a legacy key: %v, want ErrCorrupt", err)
	}
}

// TestPublishEveryKeyRoundTrips: a Publish with every field set is
// written and read back unchanged (the strict reader knows every key the
// writer writes; a resumed generation's resumed_from was once refused as
// an unknown key, so its job file read as corrupt).
func TestPublishEveryKeyRoundTrips(t *testing.T) {
	in := Publish{Kind: "oci-generation", WTXT: "/q/hold/x.wtxt", Bytes: 9, Header: &gitops.Header{Gen: 3},
		Requested: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ResumedFrom: 2, Sent: true, State: json.RawMessage(`{"manifest":"m"}`)}
	v := reflect.ValueOf(in)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s is not set here: set it, so that it is round-tripped", v.Type().Field(i).Name)
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Publish
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("read back %s: %v", b, err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	var j Job
	jb := fmt.Sprintf(`{"branch":"snapshots","gen":3,"commit":"","enqueued":"2026-01-02T03:04:05Z","attempts":0,"publish":%s}`, b)
	if err := json.Unmarshal([]byte(jb), &j); err != nil || j.Publish == nil || j.Publish.ResumedFrom != 2 {
		t.Fatalf("job: %+v, %v", j.Publish, err)
	}
}
