package gitexec

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// gitExecAllowed holds the files and folders (module-relative, slash
// separated; a folder ends in "/") that still start git themselves. The
// list must shrink to empty: the multi-rank ledger moves onto gitops.Repo
// and takes its git children from this package.
var gitExecAllowed = []string{
	"store/oci/ranks/",
	"cmd/snapd/ranks.go",
}

// testSupport reports whether the module-relative folder dir holds a
// test-support package, which may run git itself to build fixtures.
func testSupport(dir string) bool {
	switch dir {
	case "internal/gitexec", "internal/gittest", "internal/registrytest":
		return true
	}
	switch filepath.Base(dir) {
	case "testdata", "verifytest", "reviewtest":
		return true
	}
	return false
}

// gitProgram matches the program expression of an exec.Command that runs
// git: the literal "git" (or a path ending in /git), or any expression
// whose source names git (a variable, a field, a method: git, p.remote.Git,
// g.git()).
var gitProgram = regexp.MustCompile(`(?i)git`)

// TestOnlyGitexecRunsGit walks the module's non-test Go files and fails
// when one outside this package, the test-support packages and the
// allowlist starts a git process with os/exec.
func TestOnlyGitexecRunsGit(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	var files int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(path, root), string(filepath.Separator)))
		if d.IsDir() {
			if rel != "" && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || testSupport(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, pos := range gitCommands(fset, f) {
			if a := allowed(rel); a != "" {
				used[a] = true
				continue
			}
			t.Errorf("%s: starts git with os/exec; run it through internal/gitexec", fset.Position(pos))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked only %d files under %s", files, root)
	}
	for _, a := range gitExecAllowed {
		if !used[a] {
			t.Logf("%s no longer starts git: remove it from gitExecAllowed", a)
		}
	}
}

// allowed returns the gitExecAllowed entry covering rel, or "".
func allowed(rel string) string {
	for _, a := range gitExecAllowed {
		if a == rel || strings.HasSuffix(a, "/") && strings.HasPrefix(rel, a) {
			return a
		}
	}
	return ""
}

// gitCommands returns the positions of exec.Command and
// exec.CommandContext calls in f (os/exec under any name) whose program
// is git (gitProgram), and of exec.Cmd literals whose Path is.
func gitCommands(fset *token.FileSet, f *ast.File) []token.Pos {
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "os/exec" {
			name = "exec"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" || name == "_" {
		return nil
	}
	isExec := func(e ast.Expr, sel string) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok || s.Sel.Name != sel {
			return false
		}
		id, ok := s.X.(*ast.Ident)
		return ok && id.Name == name
	}
	src := func(e ast.Expr) string {
		if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			s, _ := strconv.Unquote(bl.Value)
			return s
		}
		var b strings.Builder
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				b.WriteString(id.Name + " ")
			}
			return true
		})
		return b.String()
	}
	var out []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			var prog ast.Expr
			switch {
			case isExec(n.Fun, "Command") && len(n.Args) > 0:
				prog = n.Args[0]
			case isExec(n.Fun, "CommandContext") && len(n.Args) > 1:
				prog = n.Args[1]
			}
			if prog != nil && gitProgram.MatchString(src(prog)) {
				out = append(out, n.Pos())
			}
		case *ast.CompositeLit:
			if isExec(n.Type, "Cmd") {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Path" && gitProgram.MatchString(src(kv.Value)) {
							out = append(out, n.Pos())
						}
					}
				}
			}
		}
		return true
	})
	return out
}

// The walker's own check: it finds git in the forms the tree used.
func TestGitCommandsFinds(t *testing.T) {
	const src = `package p
import (
	"context"
	x "os/exec"
)
func f(ctx context.Context, g struct{ Git string }, py string) {
	x.Command("git", "status")
	x.CommandContext(ctx, g.Git, "push")
	x.CommandContext(ctx, gitPath(), "log")
	_ = &x.Cmd{Path: "/usr/bin/git"}
	x.Command(py, "-c", "import torch")
	x.Command("cp", "-a")
}
func gitPath() string { return "git" }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, p := range gitCommands(fset, f) {
		lines = append(lines, fset.Position(p).Line)
	}
	if want := []int{7, 8, 9, 10}; !equalInts(lines, want) {
		t.Errorf("found git on lines %v, want %v", lines, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
