package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "", 3}, {"stat-dir", "state-dir", 1}, {"kitten", "sitting", 3}, {"ab", "ba", 1}, {"token_flie", "token_file", 1}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	flags := []string{"state-dir", "config", "json", "help", "log-level", "quiet"}
	for _, c := range []struct{ typed, want string }{
		{"stat-dir", "state-dir"},
		{"confg", "config"},
		{"jsn", "json"},
		{"log-lev", "log-level"}, // prefix
		{"xyzzy", ""},
		{"state-dir", ""}, // exact: nothing to suggest
		{"q", ""},
	} {
		if got := Nearest(c.typed, flags); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.typed, got, c.want)
		}
	}
}
