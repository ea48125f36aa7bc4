package gitops

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

func TestParseHeader(t *testing.T) {
	w, mt := genWTXT(123, "", []testArray{{name: "x", data: pseudo(1, 100)}})
	h, err := ParseHeader(bytes.NewReader(w))
	if err != nil {
		t.Fatal(err)
	}
	f := h.Root.Fields()
	if h.Gen != 123 || h.Root.Gen != "000123" || h.Root.Build != "test-build" || h.Root.TS != "2026-01-01T02:03:00Z" ||
		f[5].Value != mt || f[4].Value != strings.Repeat("0", 64) || !wtxt.IsHex64(f[3].Value) || h.Root.SHA256All == [32]byte{} || h.Pending {
		t.Fatalf("header %+v", h)
	}
	s := string(w)
	bad := map[string]string{
		"not wtxt":     "WTXT 2\n" + s[7:],
		"no meta":      strings.Replace(s, "\nmeta ", "\nmexa ", 1),
		"short gen":    strings.Replace(s, "gen=000123", "gen=123", 1),
		"no build":     strings.Replace(s, " build=test-build", "", 1),
		"bad root":     strings.Replace(s, "merkle_this="+mt, "merkle_this=xyz", 1),
		"empty":        "",
		"truncated":    s[:30],
		"long line":    "WTXT 1\n" + strings.Repeat("x", 64<<10+1) + "\n",
		"root missing": strings.Replace(s, "\nroot ", "\nrxot ", 1),
	}
	bad["secret first line"] = "SECRET-CONTENT-7f3a\n" + s
	for name, in := range bad {
		_, err := ParseHeader(strings.NewReader(in))
		if !errors.Is(err, ErrHeader) {
			t.Errorf("%s: %v", name, err)
		} else if strings.Contains(err.Error(), "SECRET-CONTENT") {
			t.Errorf("%s: error quotes the file: %v", name, err)
		}
	}
	// root_pending + WSUM.
	pending := strings.Replace(s, "\nroot ", "\nroot_pending sha256_all="+strings.Repeat("0", 64)+" note=\"finalize with WSUM\"\nx ", 1)
	hp, err := ParseHeader(strings.NewReader(pending))
	if err != nil || !hp.Pending || hp.Root.SHA256All != [32]byte{} {
		t.Fatalf("pending: %+v %v", hp, err)
	}
	wsum := "WSUM 1 sha256_all=" + f[3].Value + " merkle_prev=" + f[4].Value + " merkle_this=" + f[5].Value + " sign=" + base64.StdEncoding.EncodeToString(make([]byte, 64)) + "\n"
	if err := ParseWSUM(strings.NewReader(wsum), hp); err != nil || hp.Root.Fields()[5].Value != mt {
		t.Fatalf("wsum: %+v %v", hp, err)
	}
	for _, b := range []string{"", "WSUM 2 x\n", "WSUM 1 sha256_all=00\n"} {
		if err := ParseWSUM(strings.NewReader(b), hp); !errors.Is(err, ErrHeader) {
			t.Errorf("WSUM %q: %v", b, err)
		}
	}
	if _, err := layout.ParseManifest(bytes.Repeat([]byte("x"), layout.MaxManifestSize+1)); !errors.Is(err, layout.ErrParts) {
		t.Errorf("oversized MANIFEST: %v", err)
	}
	for _, l := range []string{"", "auto", "single", "split"} {
		if _, err := ParseLayout(l); err != nil {
			t.Errorf("layout %q: %v", l, err)
		}
	}
	if _, err := ParseLayout("big"); err == nil {
		t.Error("layout big accepted")
	}
}

// TestCommitArmored: an age-armored WTXT has no readable header; the
// caller supplies it, and split storage falls back to line cuts.
func TestCommitArmored(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRepo(dir+"/r.git", Config{Layout: LayoutSplit, PartLimit: MinPartLimit})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := genWTXT(1, "", []testArray{{name: "x", data: pseudo(1, 100)}})
	h, _ := ParseHeader(bytes.NewReader(w))
	var armored bytes.Buffer
	armored.WriteString("-----BEGIN AGE ENCRYPTED FILE-----\n")
	for i := 0; armored.Len() < 200_000; i++ {
		armored.WriteString(strings.Repeat(string(rune('A'+i%26)), 64) + "\n")
	}
	armored.WriteString("-----END AGE ENCRYPTED FILE-----\n")
	p := writeFile(t, dir, "g1.wtxt", armored.Bytes())
	if _, err := r.Commit(t.Context(), Generation{WTXT: p}); !errors.Is(err, ErrHeader) {
		t.Fatalf("armored without header: %v", err)
	}
	res, err := r.Commit(t.Context(), Generation{WTXT: p, Header: h})
	if err != nil || res.Layout != LayoutSplit {
		t.Fatalf("armored: %+v %v", res, err)
	}
	var out bytes.Buffer
	if err := r.WriteWTXT(res.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), armored.Bytes()) {
		t.Fatalf("WriteWTXT: %v", err)
	}
	if got := gitCmd(t, r.Dir(), "ls-tree", "--name-only", res.Tag+":snapshots/current.wtxt.parts"); got != "MANIFEST\nblob.000000.part\nblob.000001.part\nblob.000002.part\nblob.000003.part\n" {
		t.Fatalf("parts: %q", got)
	}
	gitCmd(t, r.Dir(), "fsck", "--strict")
}

// TestHeaderJSON: queue job files persist a Header; its JSON is the form
// of the Header that held the root values as text (same keys, same order,
// hex hashes), so job files written before the change read alike, and a
// file with a bad hash is refused without quoting it.
func TestHeaderJSON(t *testing.T) {
	w, _ := genWTXT(123, "", []testArray{{name: "x", data: pseudo(1, 100)}})
	h, err := ParseHeader(bytes.NewReader(w))
	if err != nil {
		t.Fatal(err)
	}
	f := h.Root.Fields()
	// The former declaration's encoding: its Go field names, in order,
	// the hashes as hex.
	want := []byte(fmt.Sprintf(`{"Gen":123,"GenText":%q,"TS":%q,"Build":%q,"SHA256All":%q,"MerklePrev":%q,"MerkleThis":%q,"Pending":false}`,
		f[0].Value, f[1].Value, f[2].Value, f[3].Value, f[4].Value, f[5].Value))
	got, err := json.Marshal(h)
	if err != nil || string(got) != string(want) {
		t.Fatalf("JSON\n got %s\nwant %s (%v)", got, want, err)
	}
	var back Header
	if err := json.Unmarshal(want, &back); err != nil || !reflect.DeepEqual(back, *h) {
		t.Fatalf("read back %+v, %v", back, err)
	}
	// A job written for a header without root values.
	if err := json.Unmarshal([]byte(`{"Gen":2,"GenText":"","TS":"","Build":"","SHA256All":"","MerklePrev":"","MerkleThis":"","Pending":true}`), &back); err != nil ||
		!reflect.DeepEqual(back, Header{Gen: 2, Pending: true}) {
		t.Fatalf("empty hashes: %+v, %v", back, err)
	}
	bad := strings.Replace(string(want), f[5].Value, "SECRET"+f[5].Value[6:], 1)
	if err := json.Unmarshal([]byte(bad), &back); !errors.Is(err, ErrHeader) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("bad hash: %v", err)
	}
}

// TestMessageBytes: the commit message is the trailers in their fixed
// order with the Root's text values (byte-compatible with the messages
// of existing repositories).
func TestMessageBytes(t *testing.T) {
	h := &Header{Gen: 7, Root: wtxt.Root{Gen: "000007", TS: "2026-01-02T03:04:05Z", Build: "b1", SHA256All: hash32('a'), MerklePrev: hash32('0'), MerkleThis: hash32('f')}}
	want := "snapd: generation 000007\n\nSnapd-Gen: 000007\nSnapd-Ts: 2026-01-02T03:04:05Z\nSnapd-Build: b1\n" +
		"Snapd-Sha256-All: " + hex64('a') + "\nSnapd-Merkle-Prev: " + hex64('0') + "\nSnapd-Merkle-This: " + hex64('f') + "\nSnapd-Layout: split\n"
	if got := message(h, LayoutSplit); got != want {
		t.Fatalf("message\n got %q\nwant %q", got, want)
	}
	tr := ParseTrailers(want)
	for i, k := range RootTrailers() {
		if tr[k] != h.Root.Fields()[i].Value || h.trailer(k) != tr[k] {
			t.Errorf("trailer %s: %q", k, tr[k])
		}
	}
}
