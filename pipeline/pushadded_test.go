package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/wal"
)

// addedPusher records each push's Added and pushes nowhere.
type addedPusher struct {
	mu    sync.Mutex
	added map[string]int64 // by commit
}

func (p *addedPusher) Push(_ context.Context, r gitops.PushRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.added[r.Commit.String()] = r.Added
	return nil
}

// TestPushGetsAdded: the daemon hands each commit's push the bytes the
// commit added (gitops.Result.BytesWritten), through the resend queue's
// job, so the pusher needs no git rev-list to size the push.
func TestPushGetsAdded(t *testing.T) {
	f := newFixture(t)
	var err error
	if f.repo, err = gitops.OpenRepo(filepath.Join(f.dir, RepoDir), gitops.Config{SigningKey: f.keys.sign}); err != nil {
		t.Fatal(err)
	}
	p := &addedPusher{added: map[string]int64{}}
	f.start(t, func(c *Config, d *Deps) {
		if d.Queue, err = queue.Open(filepath.Join(f.dir, QueueDir), queue.Options{Pusher: p, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	})
	for g := uint64(1); g <= 2; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
		if r := f.wait(t, g); r.State != wal.Done {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	waitPushed(t, f)
	f.stop(t)
	for g := uint64(1); g <= 2; g++ {
		commit := strings.TrimSpace(gittest.Git(t, filepath.Join(f.dir, RepoDir), "rev-parse", fmt.Sprintf("gen-%06d^{commit}", g)))
		p.mu.Lock()
		added, ok := p.added[commit]
		p.mu.Unlock()
		if !ok || added <= 0 {
			t.Errorf("gen %d: push of %s got Added %d (pushed: %v)", g, commit, added, ok)
		}
	}
}
