package gitops

import (
	"errors"

	"github.com/snapd-ml/snapd/internal/where"
)

// The Where methods of gitops' typed errors (internal/where): one place
// says how a git run and a push are located (a segments-layout read:
// gitops/layout).

// kindCheck names a git failure's class as a "git/<check>" check: the
// kind sentinel of a push (ErrRetryable, ErrAuth, ErrDiverged, ErrRejected,
// ErrLocal), "timeout" for a run killed by the timeout or the stall
// watchdog.
func kindCheck(kind error, timeout bool) string {
	if timeout {
		return where.Check(where.Git, "timeout")
	}
	for _, k := range []struct {
		err   error
		check string
	}{{ErrRetryable, "retryable"}, {ErrAuth, "auth"}, {ErrDiverged, "diverged"}, {ErrRejected, "rejected"}, {ErrLocal, "local"}} {
		if kind != nil && errors.Is(kind, k.err) {
			return where.Check(where.Git, k.check)
		}
	}
	return where.Check(where.Git, "failed")
}

// Where locates a failed git child: the part is "git <op>", the check
// "git/<class>" (kindCheck).
func (e *GitError) Where() where.Where {
	w := where.None()
	w.Part = "git " + e.Op
	w.Check = kindCheck(e.Kind, e.timeout)
	return w
}

// Where locates a failed push: the file is the remote (its URL without
// credentials), the part "branch <name>", the check "git/<class>"; the
// cause (a *GitError) fills the rest.
func (e *PushError) Where() where.Where {
	w := where.None()
	w.File = e.Remote
	if e.Branch != "" {
		w.Part = "branch " + e.Branch
	}
	var ge *GitError
	w.Check = kindCheck(e.Kind, errors.As(e.Err, &ge) && ge.timeout)
	return w.Under(where.Cause(e.Err))
}
