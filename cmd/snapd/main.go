// Command snapd makes ML training checkpoints auditable in Git: it converts
// checkpoints to deterministic, signed, ASCII-only WTXT snapshots, verifies
// them, and (as a daemon) pushes every generation to Git.
//
// Exit codes: 0 success, 1 invalid input or a failed check, 2 usage or I/O
// error. Errors go to stderr as "snapd: error: ..."; with --json, a
// command that fails before printing its JSON prints an error object on
// stdout instead (docs/JSON.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the CLI with args and returns the process exit code. It is
// the seam tests use.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &countingWriter{w: stdout}
	env := newEnv(out, stderr)
	root := newRootCommand(env)
	restrictToPlatform(root)
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := exitCode(err)
	var differ errDiffer
	if errors.As(err, &differ) {
		return code // the output already says what differs
	}
	if out.n == 0 && wantsJSON(cmd, args) {
		writeErrorJSON(stdout, err) // stdout holds one JSON document (errjson.go)
	}
	fmt.Fprintf(stderr, "snapd: error: %v\n", err)
	if h := hintFor(err); h != "" {
		fmt.Fprintf(stderr, "snapd: hint: %s\n", h)
	}
	return code
}
