// Package docs holds snapd's user documentation; its test runs the shell
// blocks of README.md, every Markdown file of docs/ and python/README.md as
// a user would, so that none can go stale.
//
// Conventions of the Markdown files:
//   - Every fenced block names its language (sh, python, yaml, json,
//     text, ...): a command a user types is ```sh, what a command prints
//     or a format's grammar is ```text. A block without one is an error.
//   - A ```sh block is run. The blocks of one file run in order in one
//     bash (set -euo pipefail), in an empty directory of their own that
//     has `python` and `scripts` of this checkout (as a checkout has),
//     with a freshly built snapd first on PATH and a python3 that has
//     torch when one is installed. `localhost:5000` is replaced by a real
//     CNCF registry on a free loopback port. Background jobs still running
//     at the end are stopped. A file whose commands need torch, git or the
//     registry is skipped, naming what is missing, where that is not
//     installed (scripts/test.sh installs all of them).
//   - A ```python block whose first line is `# NAME.py` is written to NAME
//     before the shell blocks run (a later ```sh block runs it). Other
//     ```python blocks are excerpts, not commands.
//   - A ```sh norun block is not run here, because it builds snapd, runs
//     the test suite itself, needs root or reaches the network; each of
//     its commands must be one that another test runs (norunCovered). Any
//     other word after sh is an error.
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

// groupShared is what runs the group-shared mode's root-only steps.
const groupShared = "wal TestGroupSharedUsers and cmd/snapd TestGroupSharedDaemon (as root: real users and group)"

// norunCovered maps the commands a `sh norun` block may hold to the test
// that runs them.
var norunCovered = map[string]string{
	"go run ./cmd/snapd demo": "cmd/snapd TestDemo*",
	"scripts/test.sh":         ".ci/run (this suite)",
	"go install ./cmd/snapd":  "scripts/installtest TestWorkflowBuildsPinnedSnapd",
	"scripts/release.sh":      "scripts/installtest TestReleaseScript",
	"scripts/dense-bench.sh":  "scripts/densebench TestDenseBenchScript (1 MiB, 2 generations, no trainer)",
	"python3 -m venv .venv && .venv/bin/pip install --no-index ./python": "cmd/snapd TestTrainerModuleInstalls",
	// docs/OPERATING.md, trainer and daemon as different users.
	"groupadd snapd-ml; usermod -aG snapd-ml alice":          groupShared,
	"install -d -o snapd-ml -g snapd-ml -m 2770 /data/snapd": groupShared,
	"umask 0007; snapd run --state-dir /data/snapd":          groupShared,
	"umask 0007; python train.py":                            groupShared,
}

// block is one fenced code block: its language (the info string's first
// word), the rest of the info string, the line of its opening fence and
// its text (the fence's indentation removed, as in a list item).
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
	indent := 0
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		trimmed := strings.TrimLeft(l, " ")
		if strings.HasPrefix(trimmed, "```") {
			if cur == nil {
				fs := strings.Fields(strings.TrimPrefix(trimmed, "```"))
				b := block{line: n}
				if len(fs) > 0 {
					b.lang = fs[0]
					b.info = strings.Join(fs[1:], " ")
				}
				cur, indent = &b, len(l)-len(trimmed)
				continue
			}
			if strings.TrimSpace(trimmed) == "```" {
				out = append(out, *cur)
				cur = nil
				continue
			}
		}
		if cur != nil {
			for i := 0; i < indent && strings.HasPrefix(l, " "); i++ {
				l = l[1:]
			}
			cur.body += l + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s:%d: %v", path, n, err)
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

// markdownFiles are the documents whose blocks are checked and run: the
// README, the Python helper's README and every Markdown file of docs/, so
// that a new document's commands are run without being listed here.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no Markdown file in docs/")
	}
	return append([]string{"../README.md", "../python/README.md"}, docs...)
}

// docName is md's path in the checkout (docs/OPERATING.md).
func docName(md string) string {
	if rel, ok := strings.CutPrefix(filepath.ToSlash(md), "../"); ok {
		return rel
	}
	return "docs/" + filepath.ToSlash(md)
}

// shellLike are languages of commands that would not be run.
var shellLike = map[string]bool{"bash": true, "shell": true, "console": true, "zsh": true, "shell-session": true}

// TestFencesNameTheirLanguage: every fenced block says what it holds, so
// that no command hides in an unlabelled block the docs test never runs.
// TestReadmeStaysShort: the README is for a newcomer's first hour; the
// rest belongs in docs/ (benchmark tables too).
func TestReadmeStaysShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 250 {
		t.Fatalf("README.md has %d lines, at most 250: move detail to docs/", n)
	}
}

func TestFencesNameTheirLanguage(t *testing.T) {
	for _, md := range markdownFiles(t) {
		for _, b := range blocks(t, md) {
			switch {
			case b.lang == "":
				t.Errorf("%s:%d: fenced block without a language: ```sh for commands, ```text for output or a grammar, ```python, ```yaml, ```json ...", docName(md), b.line)
			case shellLike[b.lang]:
				t.Errorf("%s:%d: ```%s is never run: commands are ```sh (run by this test) or ```sh norun", docName(md), b.line, b.lang)
			case b.lang == "sh" && b.info != "" && b.info != "norun":
				t.Errorf("%s:%d: ```sh %s: a shell block is ```sh (run by this test) or ```sh norun", docName(md), b.line, b.info)
			}
		}
	}
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
					t.Errorf("%s:%d: %q is in a norun block but no test runs it (norunCovered)", docName(md), b.line, c)
				}
			}
		}
	}
}

var pyName = regexp.MustCompile(`^# ([A-Za-z0-9_]+\.py)\b`)

// missingTool names a tool the commands (shell script and python files)
// need that is not installed, or returns "".
func missingTool(commands string, hasTorch bool) string {
	if strings.Contains(commands, "torch") && !hasTorch {
		return "python3 with torch (scripts/test.sh installs python3-torch)"
	}
	for _, tool := range []struct{ name, use string }{
		{"git", "git "},
		{"ssh-keygen", "gpg.ssh.allowedSignersFile"}, // git verify-commit, verify-tag
	} {
		if !strings.Contains(commands, tool.use) {
			continue
		}
		if _, err := exec.LookPath(tool.name); err != nil {
			return tool.name
		}
	}
	return ""
}

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
	build := testutil.GoBuild(root, filepath.Join(bin, "snapd"), "./cmd/snapd")
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
				fmt.Fprintf(&script, "echo '### %s:%d' >&2\n%s\n", docName(md), b.line, b.body)
				runs++
			case b.lang == "python" && pyName.MatchString(b.body):
				pyFiles = append(pyFiles, b)
			}
		}
		if runs == 0 {
			continue
		}
		t.Run(docName(md), func(t *testing.T) {
			t.Parallel()
			body := script.String()
			commands := body
			for _, b := range pyFiles {
				commands += b.body
			}
			if tool := missingTool(commands, pyPath != ""); tool != "" {
				t.Skipf("%s: its commands need %s, which is not installed", docName(md), tool)
			}
			reg := ""
			if strings.Contains(commands, "localhost:5000") {
				reg = registrytest.Start(t, "", "").Host
				body = strings.ReplaceAll(body, "localhost:5000", reg)
			}
			work := t.TempDir()
			for _, n := range []string{"python", "scripts"} {
				if err := os.Symlink(filepath.Join(root, n), filepath.Join(work, n)); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range pyFiles {
				name := pyName.FindStringSubmatch(b.body)[1]
				text := b.body
				if reg != "" {
					text = strings.ReplaceAll(text, "localhost:5000", reg)
				}
				if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
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
			ownGroup(cmd)
			err := cmd.Run()
			killGroup(cmd) // a daemon the script left behind when it failed
			if err != nil {
				t.Fatalf("%s: the documented commands failed: %v\n%s", docName(md), err, out.String())
			}
			t.Logf("%s:\n%s", docName(md), out.String())
		})
	}
}
