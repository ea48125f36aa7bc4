package ranks

import (
	"bytes"
	"context"
	"testing"
)

// A push that fails during a registry outage succeeds once the registry
// is back, from the same Repository (no state of the failed attempt
// sticks).
func TestPushPartAfterOutage(t *testing.T) {
	reg := startRegistry(t)
	repo := openRepo(t, reg, "job/outage")
	ctx := context.Background()
	wt, _, _ := testPart(t, 1, 0, testChain, testKey(1))
	reg.Stop()
	if _, err := PushPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, testChain, 1024); err == nil {
		t.Fatal("push with the registry down succeeded")
	} else {
		t.Log(err)
	}
	if _, err := PushPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, testChain, 1024); err == nil {
		t.Fatal("push with the registry down succeeded")
	} else {
		t.Log(err)
	}
	reg.Restart(t)
	if _, err := PushPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, testChain, 1024); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FetchPart(ctx, repo, "000001", 0, 2, testChain); err != nil {
		t.Fatal(err)
	}
}
