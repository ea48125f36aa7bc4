package configs

import (
	"strings"
	"testing"
	"time"
)

func TestRanksSection(t *testing.T) {
	c, err := Parse([]byte("git: {remote: /srv/ledger.git}\nranks:\n  job: run-7\n  world_size: 8\n  repository: 127.0.0.1:5000/job\n  committer: true\n  on_timeout: skip\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Ranks.WithDefaults()
	if !r.Enabled() || r.WorldSize != 8 || r.OnTimeout != "skip" || time.Duration(r.Timeout) != 10*time.Minute || time.Duration(r.PollInterval) != 2*time.Second {
		t.Fatalf("%+v", r)
	}
	if d, _ := Parse(nil); d.Ranks.Enabled() {
		t.Fatal("ranks enabled by default")
	}
	for _, c := range []struct{ yaml, field string }{
		{"ranks: {job: j, world_size: 0, repository: r}\n", ""}, // disabled: no check
		{"ranks: {job: j, world_size: 70000, repository: r}\n", "ranks.world_size"},
		{"ranks: {job: j, world_size: -1, repository: r}\n", "ranks.world_size"},
		{"ranks: {job: 'a b', world_size: 2, repository: r}\n", "ranks.job"},
		{"ranks: {job: j, world_size: 2}\n", "ranks.repository"},
		{"ranks: {job: j, world_size: 2, repository: r, on_timeout: drop}\n", "ranks.on_timeout"},
		{"ranks: {job: j, world_size: 2, repository: r, committer: true}\n", "ranks.committer"},
		{"ranks: {job: j, world_size: 2, repository: r, elect: true}\n", "elect"},
	} {
		_, err := Parse([]byte(c.yaml))
		if c.field == "" {
			if err != nil {
				t.Errorf("%q: %v", c.yaml, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: want an error naming %s, got %v", c.yaml, c.field, err)
		}
	}
}
