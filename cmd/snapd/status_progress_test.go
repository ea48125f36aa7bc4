package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/pipeline"
)

// TestStatusShowsInProgress: the text form names each stage in progress
// with its generation, how long it has run and the expected size.
func TestStatusShowsInProgress(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	st := &pipeline.Status{StateDir: "/s", Running: true, PID: 42, Chain: &pipeline.ChainState{},
		InProgress: []pipeline.Activity{
			{Gen: 12, GenText: "000012", Stage: "git", Started: now.Add(-2500 * time.Millisecond)},
			{Gen: 13, GenText: "000013", Stage: "encode", Started: now.Add(-4 * time.Second), Total: 3 << 30},
		}}
	var b bytes.Buffer
	writeStatus(&b, st, now)
	for _, want := range []string{"daemon:      running (pid 42)\n", "in progress: gen 000012 git, for 2.5s\n",
		"in progress: gen 000013 encode, for 4s (about 3.0 GiB to write)\n"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("status lacks %q:\n%s", want, b.String())
		}
	}
}
