package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// defaultPrincipal is snapd@HOST (sshsig.DefaultPrincipal of
// os.Hostname's answer).
func defaultPrincipal() string {
	h, _ := os.Hostname()
	return sshsig.DefaultPrincipal(h)
}

// checkPrincipal validates an allowed_signers principal given by a user.
func checkPrincipal(flag, p string) error {
	if !sshsig.ValidPrincipal(p) {
		return usageError{fmt.Errorf("%s %q: want 1..128 of A-Z a-z 0-9 . _ @ + - (an email-like name, e.g. snapd@trainer-01)", flag, p)}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it needs quoting, so printed
// commands can be pasted as they are.
func shellQuote(s string) string {
	if s != "" && regexp.MustCompile(`^[A-Za-z0-9._/@:+=,-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
