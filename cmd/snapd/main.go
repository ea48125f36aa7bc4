// Command snapd makes ML training checkpoints auditable in Git: it converts
// checkpoints to deterministic, signed, ASCII-only WTXT snapshots, verifies
// them, and (as a daemon) pushes every generation to Git.
//
// Exit codes: 0 success, 1 invalid input or a failed check, 2 usage or I/O
// error. Errors go to stderr as "snapd: error: ...".
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
	env := newEnv(stdout, stderr)
	root := newRootCommand(env)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := exitCode(err)
	var differ errDiffer
	if errors.As(err, &differ) {
		return code // the output already says what differs
	}
	fmt.Fprintf(stderr, "snapd: error: %v\n", err)
	if h := hintFor(err); h != "" {
		fmt.Fprintf(stderr, "snapd: hint: %s\n", h)
	}
	return code
}
