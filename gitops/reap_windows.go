package gitops

import "os"

// killProcess terminates the process pid (reapStale, which finds nothing
// to reap without /proc).
func killProcess(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Kill()
}
