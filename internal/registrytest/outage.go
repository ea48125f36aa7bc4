package registrytest

import "testing"

// Stop kills the registry process: an outage. Its storage stays.
func (r *Registry) Stop() { r.stop() }

// Restart starts the registry again on the same address and storage
// (after Stop) and waits until it answers.
func (r *Registry) Restart(t *testing.T) {
	t.Helper()
	r.serve(t)
}
