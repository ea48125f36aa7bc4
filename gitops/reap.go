package gitops

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pgidFile (in the local repository) names the process group of the git
// run in progress and the process that started it: "<pgid> <leader start
// time in clock ticks> <owner pid> <owner start time>\n". If the
// daemon is killed (kill -9) mid-push, its git children live on in their
// own group (e.g. git-remote-http waiting on a silent server); the next
// run of any GitPusher on the repository kills that group first.
const pgidFile = "snapd-push.pgid"

// procStart returns a process's pgid and start time (field 22 of
// /proc/PID/stat), or ok=false.
func procStart(pid int) (pgid int, start uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) may hold spaces: fields restart after ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); pgid is field 5, starttime field 22.
	if len(f) < 20 {
		return 0, 0, false
	}
	g, err1 := strconv.Atoi(f[2])
	s, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return g, s, true
}

// recordGroup writes the pgid file for a started git process.
func (p *GitPusher) recordGroup(pid int) {
	_, start, ok := procStart(pid)
	if !ok {
		return
	}
	self := os.Getpid()
	_, selfStart, _ := procStart(self)
	_ = os.WriteFile(filepath.Join(p.repoDir, pgidFile), fmt.Appendf(nil, "%d %d %d %d\n", pid, start, self, selfStart), 0o600)
}

// forgetGroup removes the pgid file.
func (p *GitPusher) forgetGroup() { _ = os.Remove(filepath.Join(p.repoDir, pgidFile)) }

// reapStale kills what is left of a process group recorded by an earlier
// daemon that is gone (killed): every process of that group started no
// earlier than its recorded leader, so a reused group id is never hit. A
// group whose owner still runs (a concurrent push) is left alone. It
// returns the number of processes signalled.
func (p *GitPusher) reapStale() int {
	b, err := os.ReadFile(filepath.Join(p.repoDir, pgidFile))
	if err != nil {
		return 0
	}
	var pgid, owner int
	var start, ownerStart uint64
	if _, err := fmt.Sscanf(string(b), "%d %d %d %d", &pgid, &start, &owner, &ownerStart); err != nil || pgid <= 1 {
		p.forgetGroup()
		return 0
	}
	if _, s, ok := procStart(owner); ok && s == ownerStart {
		return 0 // its owner is alive: not stale
	}
	defer p.forgetGroup()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if g, s, ok := procStart(pid); ok && g == pgid && s >= start {
			if killProcess(pid) == nil {
				n++
			}
		}
	}
	return n
}
