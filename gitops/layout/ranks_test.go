package layout

import "testing"

// TestIsRanks: a directory with ranks/ and no stored WTXT is a multi-rank
// generation; with a WTXT beside it, or without ranks/, it is not (and
// Detect is unchanged by ranks/).
func TestIsRanks(t *testing.T) {
	set := func(names ...string) Has {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return func(n string) bool { return m[n] }
	}
	if !IsRanks(set(DirRanks, "generation.txt")) {
		t.Fatal("ranks/ alone is not recognised")
	}
	for _, h := range []Has{set(), set(FileWTXT), set(DirRanks, FileWTXT), set(DirRanks, FileSkeleton)} {
		if IsRanks(h) {
			t.Fatal("recognised a directory that is not a multi-rank generation")
		}
	}
	if n, err := Detect(set(DirRanks, FileWTXT)); err != nil || n != Single {
		t.Fatalf("Detect with ranks/ beside a WTXT: %s %v", n, err)
	}
}
