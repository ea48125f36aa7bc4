package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/verify"
	"github.com/snapd-ml/snapd/internal/gitexec"
	"github.com/snapd-ml/snapd/wal"
)

// runErrorJSON runs a command that must fail with --json and returns the
// error object it printed on stdout.
func runErrorJSON(t *testing.T, args ...string) errorBody {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code == 0 {
		t.Fatalf("%s: exit 0\n%s", strings.Join(args, " "), out.String())
	}
	var ej errorJSON
	if err := json.Unmarshal(out.Bytes(), &ej); err != nil {
		t.Fatalf("%s: stdout is not the error object: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return ej.Error
}

// TestErrorJSONWhereFromCommands: a command run with --json that fails
// with a WTXT check, a codec's check or a seal's check prints an error
// object whose where names the file, the position and the namespaced
// check.
func TestErrorJSONWhereFromCommands(t *testing.T) {
	d := t.TempDir()

	// A WTXT parity failure: file, line, array, chunk, check.
	good, err := os.ReadFile(filepath.Join("..", "..", "formats", "wtxt", "testdata", "golden-tiny.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("\nAQID d\n"), []byte("\nAQID e\n"), 1)
	if bytes.Equal(bad, good) {
		t.Fatal("fixture changed: no chunk line to damage")
	}
	badWTXT := filepath.Join(d, "bad.wtxt")
	os.WriteFile(badWTXT, bad, 0o644)
	w := runErrorJSON(t, "inspect", "--json", badWTXT).Where
	if w.File != badWTXT || w.Line != 8 || w.Array != "x" || w.Chunk == nil || *w.Chunk != 0 || w.Check != "parity" || w.Namespace != "wtxt" {
		t.Errorf("wtxt: where %+v", w)
	}

	// A codec's check: an STB file cut short.
	stb, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "fixtures", "stb", "single_f32.stb"))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(d, "cut.stb")
	os.WriteFile(cut, stb[:len(stb)-2], 0o644)
	w = runErrorJSON(t, "inspect", "--json", cut).Where
	if w.File != cut || w.Check == "" || w.Namespace != "format" {
		t.Errorf("format: where %+v", w)
	}

	// A seal that does not parse, beside an armored file.
	sealed := filepath.Join(d, "sealed.wtxt")
	os.WriteFile(sealed, []byte("-----BEGIN AGE ENCRYPTED FILE-----\nYWdl\n-----END AGE ENCRYPTED FILE-----\n"), 0o644)
	os.WriteFile(armor.SealPath(sealed), []byte("WSEAL 2\n"), 0o644)
	w = runErrorJSON(t, "verify", "--json", sealed).Where
	if w.File != armor.SealPath(sealed) || w.Check != "grammar" || w.Namespace != "seal" {
		t.Errorf("seal: where %+v", w)
	}
	// The same seal as --prev.
	w = runErrorJSON(t, "verify", "--json", badWTXT, "--prev", sealed).Where
	if w.File != armor.SealPath(sealed) || w.Check != "grammar" || w.Namespace != "seal" {
		t.Errorf("seal as --prev: where %+v", w)
	}
}

// TestErrorJSONWhereEveryKind: every typed error of the project, wrapped
// as the commands wrap them, gives the --json error object a located
// where (the kinds no --json command can cheaply be made to fail with:
// the ledger's, the segments layout's, git's and the request log's).
func TestErrorJSONWhereEveryKind(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	_, sealErr := armor.ParseSeal([]byte("nope\n"))
	cases := []struct {
		name string
		err  error
		want whereJSON
	}{
		{"wtxt", fmt.Errorf("open: %w", &wtxt.Error{File: "a.wtxt", Line: 9, Array: "w", Chunk: 2, Check: wtxt.CheckCRC32C, Msg: "m"}),
			whereJSON{File: "a.wtxt", Line: 9, Array: "w", Chunk: i64(2), Check: "crc32c", Namespace: "wtxt"}},
		{"ranks", fmt.Errorf("index: %w", wranks.Fail("gen-000002.ranks", 3, 1, wranks.CheckChain, "m")),
			whereJSON{File: "gen-000002.ranks", Line: 3, Part: "rank 1", Check: "chain", Namespace: "ranks"}},
		{"seal", fmt.Errorf("x.wseal: %w", sealErr), whereJSON{Check: "grammar", Namespace: "seal"}},
		{"ledger", fmt.Errorf("gen 3: %w", verify.Failure{Commit: "0123456789abcdef", Gen: "000003", File: "snapshots/current.wtxt", Line: 4, Check: verify.CheckChain, Message: "m"}),
			whereJSON{File: "snapshots/current.wtxt", Line: 4, Part: "commit 0123456789abcdef", Check: "chain", Namespace: "ledger"}},
		{"ledger, a wtxt check", verify.Failure{Commit: "c", File: "f", Check: "wtxt/crc32c", Message: "m"},
			whereJSON{File: "f", Part: "commit c", Check: "crc32c", Namespace: "wtxt"}},
		{"segments, a wtxt cause", &layout.SegmentsError{Path: "p.s000001.part", Line: 5, Err: &wtxt.Error{Array: "w", Chunk: 1, Check: wtxt.CheckGrammar, Msg: "m"}},
			whereJSON{File: layout.DirWTXTSegs + "/p.s000001.part", Line: 5, Array: "w", Chunk: i64(1), Check: "grammar", Namespace: "wtxt"}},
		{"segments, structure", &layout.SegmentsError{Path: layout.ManifestName, Layout: true, Err: errors.New("m")},
			whereJSON{File: layout.DirWTXTSegs + "/" + layout.ManifestName, Check: "structure", Namespace: "layout"}},
		{"segments, parts", &layout.SegmentsError{Path: "seg/ab/x.seg", Err: errors.New("m")},
			whereJSON{File: layout.DirWTXTSegs + "/seg/ab/x.seg", Check: "parts", Namespace: "layout"}},
		{"git", &gitops.GitError{Op: "ls-remote", Kind: gitops.ErrAuth, ExitCode: 128},
			whereJSON{Part: "git ls-remote", Check: "auth", Namespace: "git"}},
		{"push", &gitops.PushError{Remote: "https://example.invalid/r.git", Branch: "snapshots", Kind: gitops.ErrDiverged, Err: &gitops.GitError{Op: "push", Kind: gitops.ErrDiverged, ExitCode: 1}},
			whereJSON{File: "https://example.invalid/r.git", Part: "branch snapshots", Check: "diverged", Namespace: "git"}},
		{"layout detect", fmt.Errorf("gen 2: %w", &layout.DetectError{Path: layout.FileWTXT, Msg: "m", Err: layout.ErrAmbiguous}),
			whereJSON{File: layout.FileWTXT, Check: "ambiguous", Namespace: "layout"}},
		{"git child", fmt.Errorf("clone: %w", &gitexec.Error{Op: "fetch", ExitCode: 128}),
			whereJSON{Part: "git fetch", Check: "exit", Namespace: "git"}},
		{"wal cursor", fmt.Errorf("status: %w", &wal.CursorError{Dir: "/s/wal", Size: -1, Reason: "r"}),
			whereJSON{File: filepath.Join("/s/wal", wal.CursorFile), Check: "cursor", Namespace: "wal"}},
		{"wal corrupt", &wal.CorruptError{Segment: 3, Offset: 17, Length: 2, Reason: "r"},
			whereJSON{File: wal.SegmentName(3), Offset: i64(17), Check: "corrupt", Namespace: "wal"}},
		{"wal record", &wal.ParseError{Col: 4, Reason: "r"}, whereJSON{Check: "record", Namespace: "wal"}},
	}
	for _, c := range cases {
		got := newErrorJSON(c.err).Error.Where
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(c.want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s: where %s, want %s", c.name, g, w)
		}
	}
}

// TestChainIsOneCheck: every error that reports the chain check matches
// wtxt.ErrChain (and formats' checksum kind through it).
func TestChainIsOneCheck(t *testing.T) {
	for name, err := range map[string]error{
		"wtxt.Error":            &wtxt.Error{Check: wtxt.CheckChain, Chunk: -1, Msg: "m"},
		"verify.Failure":        verify.Failure{Check: verify.CheckChain},
		"verify.Failure, ranks": verify.Failure{Check: string(wranks.CheckChain)},
		"gitops.ErrChainBreak":  fmt.Errorf("commit: %w", gitops.ErrChainBreak),
		"ranks.CheckChain":      wranks.Fail("i", 0, -1, wranks.CheckChain, "m"),
		"armor.SealError":       fmt.Errorf("x.wseal: %w", &armor.SealError{Check: string(wtxt.CheckChain), Msg: "m"}),
	} {
		if !errors.Is(err, wtxt.ErrChain) {
			t.Errorf("%s does not match wtxt.ErrChain", name)
		}
	}
	if errors.Is(&wtxt.Error{Check: wtxt.CheckCRC32C, Chunk: -1}, wtxt.ErrChain) || errors.Is(verify.Failure{Check: verify.CheckTag}, wtxt.ErrChain) ||
		errors.Is(&armor.SealError{Check: "sha256"}, wtxt.ErrChain) {
		t.Error("another check matches wtxt.ErrChain")
	}
}
