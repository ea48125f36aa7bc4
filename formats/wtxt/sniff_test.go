package wtxt

import "testing"

func TestSniffSubFormats(t *testing.T) {
	for _, c := range []struct {
		head           string
		wsum, skeleton bool
	}{
		{"WSUM 1 sha256_all=", true, false},
		{SkeletonMagic + "\nWTXT 1\n", false, true},
		{SkeletonMagic + " ", false, false},
		{"WTXT 1\n", false, false},
		{"", false, false},
	} {
		if IsWSUM([]byte(c.head)) != c.wsum || IsSkeleton([]byte(c.head)) != c.skeleton {
			t.Errorf("%q: IsWSUM %v IsSkeleton %v", c.head, IsWSUM([]byte(c.head)), IsSkeleton([]byte(c.head)))
		}
	}
}
