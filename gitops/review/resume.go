package review

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gitexec"
)

// Resume is a resume record between a pull request's base and head: the
// run restarted from generation From (commit FromCommit) and abandoned
// the generations Abandoned ("FIRST..LAST"); docs/FORMAT.md "Resumed
// runs". Commit is the record's own commit.
type Resume struct {
	Commit, FromCommit string
	From               uint64
	Abandoned          string
}

// ResumeFinder is implemented by a Fetcher that can read history: the
// resume records on the first-parent path from head back to (not
// including) base, newest first. A Fetcher without history (the contents
// API) does not implement it; the review then says nothing of resumes.
type ResumeFinder interface {
	Resumes(ctx context.Context, base, head string) ([]Resume, error)
}

// maxResumeLog bounds what Resumes reads of git log (commit messages of
// the change's first-parent history).
const maxResumeLog = 16 << 20

// Resumes implements ResumeFinder with git log. ErrUnavailable when the
// repository does not hold both commits.
func (g GitFetcher) Resumes(ctx context.Context, base, head string) ([]Resume, error) {
	if !isHexSHA(base) || !isHexSHA(head) {
		return nil, fmt.Errorf("git: %q..%q are not commit shas", base, head)
	}
	var out limitedBuffer
	out.limit = maxResumeLog
	err := gitexec.Run(ctx, gitexec.Options{Git: g.git(), Stdout: &out}, "-C", g.Dir, "log", "--first-parent", "--format=%H%x1f%B%x1e", base+".."+head, "--")
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("git log %s..%s: %w", base, head, ErrUnavailable)
	}
	if out.over {
		return nil, fmt.Errorf("git log %s..%s: more than %d bytes of commit messages", base, head, maxResumeLog)
	}
	var rs []Resume
	for _, entry := range strings.Split(out.String(), "\x1e") {
		sha, msg, ok := strings.Cut(strings.TrimLeft(entry, "\n"), "\x1f")
		if !ok {
			continue
		}
		rec, isRecord, err := gitops.ParseResumeMessage(msg)
		if err != nil {
			// A malformed record is verify-repo's to fail; the review
			// names it as what it is not.
			return nil, fmt.Errorf("commit %s: %w", sha, err)
		}
		if isRecord {
			rs = append(rs, Resume{Commit: sha, FromCommit: rec.FromCommit.String(), From: rec.From,
				Abandoned: rec.AbandonedFirst + ".." + rec.AbandonedLast})
		}
	}
	return rs, nil
}

// Resumes implements ResumeFinder: the first fetcher that can read the
// history answers.
func (fs Fallback) Resumes(ctx context.Context, base, head string) ([]Resume, error) {
	for _, f := range fs {
		rf, ok := f.(ResumeFinder)
		if !ok {
			continue
		}
		rs, err := rf.Resumes(ctx, base, head)
		if err == nil || !errors.Is(err, ErrUnavailable) {
			return rs, err
		}
	}
	return nil, ErrUnavailable
}

// resumeNote says what a resume within the change means for a file whose
// head generation does not continue the base's.
func resumeNote(r Resume) string {
	c := r.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return fmt.Sprintf("the run resumed from generation %06d (resume record %s; abandons %s): the head continues generation %06d's chain, not the base's; `snapd verify-repo` checks the record and its signature", r.From, c, r.Abandoned, r.From)
}

// limitedBuffer keeps at most limit bytes and notes when more came.
type limitedBuffer struct {
	strings.Builder
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if b.Len()+n > b.limit {
		b.over = true
		p = p[:max(0, b.limit-b.Len())]
	}
	b.Builder.Write(p)
	return n, nil
}
