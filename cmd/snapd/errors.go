package main

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/snapd-ml/snapd/internal/suggest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, mapped from errors in exactly one place (exitCode).
const (
	exitOK      = 0
	exitInvalid = 1 // invalid input, failed verification
	exitUsage   = 2 // bad flags/arguments, I/O errors
)

// usageError marks a wrong invocation.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// ioError marks a failure to read or write a file (as opposed to a file
// whose content is invalid).
type ioError struct{ err error }

func (e ioError) Error() string { return e.err.Error() }
func (e ioError) Unwrap() error { return e.err }

// hinted attaches a hint line shown after the error.
type hinted struct {
	err  error
	hint string
}

func (e hinted) Error() string { return e.err.Error() }
func (e hinted) Unwrap() error { return e.err }

func withHint(err error, hint string) error { return hinted{err, hint} }

func exitCode(err error) int {
	var u usageError
	var io ioError
	var pe *fs.PathError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &u), errors.As(err, &io), errors.As(err, &pe):
		return exitUsage
	case isCobraUsage(err):
		return exitUsage
	}
	return exitInvalid
}

func hintFor(err error) string {
	var h hinted
	if errors.As(err, &h) {
		return h.hint
	}
	return ""
}

// isCobraUsage recognizes the errors cobra returns for bad flags or
// arguments (it has no typed errors for them).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "requires at most", "if any flags in the group", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// flagError is the root's flag error function (every subcommand inherits
// it): a bad flag is a usage error, and an unknown long flag gets the hint
// "did you mean --NAME?" naming the nearest flag c accepts, its inherited
// flags included, when one is close enough.
func flagError(c *cobra.Command, err error) error {
	const unknown = "unknown flag: --"
	msg := err.Error()
	if !strings.HasPrefix(msg, unknown) {
		return usageError{err}
	}
	typed, _, _ := strings.Cut(strings.TrimPrefix(msg, unknown), "=")
	var names []string
	visit := func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	c.Flags().VisitAll(visit)
	c.InheritedFlags().VisitAll(visit)
	if near := suggest.Nearest(typed, names); near != "" {
		return withHint(usageError{err}, "did you mean --"+near+"?")
	}
	return usageError{err}
}
