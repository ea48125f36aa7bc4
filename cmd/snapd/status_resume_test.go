package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/pipeline"
)

// TestStatusShowsResume: the text form of snapd status shows the chain's
// last resume (chain.resume) and a declared resume still pending
// (chain.resuming), as status --json does.
func TestStatusShowsResume(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := &pipeline.Status{StateDir: "/s", Chain: &pipeline.ChainState{Gen: 4, GenText: "000004", PrevGen: 3,
		Resume:   &pipeline.ResumeState{From: 2, AtGen: 3, AbandonedLast: 3},
		Resuming: &pipeline.ResumeState{From: 1, AbandonedLast: 4}}}
	var b bytes.Buffer
	writeStatus(&b, st, now)
	for _, want := range []string{"  resumed     from gen 2 at gen 3, abandoned gen 3\n",
		"  resuming    from gen 1 (declared, no generation done since): the next generation chains to gen 1, abandoned gens 2..4\n"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("status lacks %q:\n%s", want, b.String())
		}
	}
	st.Chain.Resume, st.Chain.Resuming = nil, nil
	b.Reset()
	writeStatus(&b, st, now)
	if strings.Contains(b.String(), "resum") {
		t.Fatalf("status without a resume mentions one:\n%s", b.String())
	}
}
