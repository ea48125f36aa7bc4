// Package docs holds snapd's user documentation; its test runs the shell
// blocks of README.md as a user would, so that none can go stale.
//
// Conventions of the Markdown files:
//   - A ```sh block is run. The blocks of one file run in order in one
//     bash (set -euo pipefail), in an empty directory that has `python`
//     and `scripts` of this checkout (as a checkout has), with a freshly
//     built snapd first on PATH and a python3 that has torch when one is
//     installed. `localhost:5000` is replaced by a real CNCF registry on a
//     free loopback port. Background jobs still running at the end are
//     stopped.
//   - A ```python block whose first line is `# NAME.py` is written to NAME
//     before the shell blocks run (a later ```sh block runs it). Other
//     ```python blocks are excerpts, not commands.
//   - A ```sh norun block is not run here, because it builds snapd or runs
//     the test suite itself; each of its commands must be one that
//     another test runs (norunCovered).
package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// norunCovered maps the commands a `sh norun` block may hold to the test
// that runs them.
var norunCovered = map[string]string{
	"go run ./cmd/snapd demo": "cmd/snapd TestDemo*",
	"scripts/test.sh":         ".ci/run (this suite)",
	"go install ./cmd/snapd":  "scripts/installtest TestWorkflowBuildsPinnedSnapd",
	"scripts/release.sh":      "scripts/installtest TestReleaseScript",
	"python3 -m venv .venv && .venv/bin/pip install --no-index ./python": "cmd/snapd TestTrainerModuleInstalls",
}

type block struct {
	lang, info string
	line       int
	body       string
}

func blocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			if cur == nil {
				fs := strings.Fields(strings.TrimPrefix(l, "```"))
				b := block{line: n}
				if len(fs) > 0 {
					b.lang = fs[0]
					b.info = strings.Join(fs[1:], " ")
				}
				cur = &b
				continue
			}
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			cur.body += l + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated code block", path, cur.line)
	}
	return out
}

// commandOf strips a shell line's trailing comment.
func commandOf(l string) string {
	if i := strings.Index(l, "  #"); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}

// markdownFiles are the documents whose blocks are run: the README and
// the docs that follow the conventions above (docs/OPERATING.md and
// docs/SHARDED.md still hold reference snippets with placeholder paths).
func markdownFiles(t *testing.T) []string {
	return []string{"../README.md"}
}

// TestNorunBlocksAreCovered: a block the docs test does not run holds only
// commands another test runs.
func TestNorunBlocksAreCovered(t *testing.T) {
	for _, md := range markdownFiles(t) {
		for _, b := range blocks(t, md) {
			if b.lang != "sh" || b.info != "norun" {
				continue
			}
			for _, l := range strings.Split(b.body, "\n") {
				c := commandOf(l)
				if c == "" || strings.HasPrefix(c, "#") {
					continue
				}
				if _, ok := norunCovered[c]; !ok {
					t.Errorf("%s:%d: %q is in a norun block but no test runs it (norunCovered)", md, b.line, c)
				}
			}
		}
	}
}

var pyName = regexp.MustCompile(`^# ([A-Za-z0-9_]+\.py)\b`)

// TestDocBlocksRun runs every file's shell blocks (see the package doc).
func TestDocBlocksRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documentation's commands: a daemon, git, a registry, torch")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "snapd"), "./cmd/snapd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build snapd: %v\n%s", err, out)
	}
	// A python3 with torch first on PATH (Debian's, when python3 on PATH
	// is another build).
	pyPath := ""
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import torch").Run() == nil {
			if p, err := exec.LookPath(py); err == nil {
				pyDir := t.TempDir()
				os.Symlink(p, filepath.Join(pyDir, "python3"))
				pyPath = pyDir + string(os.PathListSeparator)
			}
			break
		}
	}
	for _, md := range markdownFiles(t) {
		bs := blocks(t, md)
		var script strings.Builder
		var pyFiles []block
		runs := 0
		for _, b := range bs {
			switch {
			case b.lang == "sh" && b.info == "":
				fmt.Fprintf(&script, "echo '### %s:%d' >&2\n%s\n", filepath.Base(md), b.line, b.body)
				runs++
			case b.lang == "python" && pyName.MatchString(b.body):
				pyFiles = append(pyFiles, b)
			}
		}
		if runs == 0 {
			continue
		}
		t.Run(filepath.Base(md), func(t *testing.T) {
			body := script.String()
			if strings.Contains(body, "torch") && pyPath == "" {
				t.Skip("needs python3 with torch (scripts/test.sh installs python3-torch)")
			}
			if strings.Contains(body, "localhost:5000") {
				reg := registrytest.Start(t, "", "")
				body = strings.ReplaceAll(body, "localhost:5000", reg.Host)
			}
			work := t.TempDir()
			for _, n := range []string{"python", "scripts"} {
				if err := os.Symlink(filepath.Join(root, n), filepath.Join(work, n)); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range pyFiles {
				name := pyName.FindStringSubmatch(b.body)[1]
				if err := os.WriteFile(filepath.Join(work, name), []byte(b.body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			full := "set -euo pipefail\n" +
				"trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT\n" + body
			ctx, cancel := context.WithTimeout(context.Background(), 3*testutil.Guard)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, "-c", full)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+pyPath+os.Getenv("PATH"),
				"PYTHONDONTWRITEBYTECODE=1", "SNAPD_STATE_DIR=", "SNAPD_CONFIG=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: the documented commands failed: %v\n%s", md, err, out.String())
			}
			t.Logf("%s:\n%s", md, out.String())
		})
	}
}
