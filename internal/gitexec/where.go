package gitexec

import (
	"errors"

	"github.com/snapd-ml/snapd/internal/where"
)

// Where locates a failed git child (internal/where): the part "git <op>",
// the check "git/timeout" or "git/stalled" for a run a watchdog killed,
// "git/killed" for another stop, else "git/exit".
func (e *Error) Where() where.Where {
	w := where.None()
	w.Part = "git " + e.Op
	switch {
	case errors.Is(e.kind, ErrTimeout):
		w.Check = where.Check(where.Git, "timeout")
	case errors.Is(e.kind, ErrStalled):
		w.Check = where.Check(where.Git, "stalled")
	case e.Reason != "":
		w.Check = where.Check(where.Git, "killed")
	default:
		w.Check = where.Check(where.Git, "exit")
	}
	return w
}
