package registrytest

import "testing"

// Stop takes the registry down (an outage); Restart brings it back on the
// same address with the same storage.
func (r *Registry) Stop() { r.stop() }

// Restart starts a stopped registry again and waits until it answers.
func (r *Registry) Restart(t *testing.T) {
	t.Helper()
	r.stop()
	r.serve(t)
}
