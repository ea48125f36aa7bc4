//go:build !linux

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunIsLinuxOnly(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--state-dir", t.TempDir()}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), errDaemonLinuxOnly.Error()) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
