package gitops

import "testing"

func TestParseWriting(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want gitProgress
		ok   bool
	}{
		{"Enumerating objects: 5, done.\nCounting objects:  20% (1/5)\rCounting objects: 100% (5/5), done.\nWriting objects:  40% (2/5)\rWriting objects:  80% (4/5), 1.20 MiB | 2.00 MiB/s\r",
			gitProgress{objects: 4, total: 5, bytes: 1258291}, true},
		{"Writing objects: 100% (20/20), 345 bytes | 345.00 KiB/s, done.\nTotal 20 (delta 0)\n", gitProgress{objects: 20, total: 20, bytes: 345}, true},
		{"Writing objects: 100% (3/3), 2.50 GiB, done.\n", gitProgress{objects: 3, total: 3, bytes: 5 << 29}, true},
		{"Writing objects:  50% (1/2)\r", gitProgress{objects: 1, total: 2}, true},
		{"Counting objects: 100% (5/5), done.\n", gitProgress{}, false},
		{"Writing objects: 100% (9/3)\r", gitProgress{}, false},
		{"Writing objects: (x/y)", gitProgress{}, false},
		{"Writing objects: 10% (1/10), 99999999999999999999 TiB\r", gitProgress{objects: 1, total: 10}, true},
	} {
		got, ok := parseWriting([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
