package rs

import "testing"

func BenchmarkParity32(b *testing.B) {
	c, _ := New(32)
	msg := make([]byte, c.DataLen())
	for i := range msg {
		msg[i] = byte(i*31 + 7)
	}
	par := make([]byte, 32)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		_ = c.Parity(par, msg)
	}
}
