package wtxt

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestReadIndex: every arr and ch line ReadIndex reports is at the line
// number and byte offset it says, with the values the line states.
func TestReadIndex(t *testing.T) {
	for _, name := range []string{"golden-tiny.wtxt", "golden-widerow.wtxt", "golden-ext.wtxt", "golden-signed.wtxt", "golden-stream.wtxt"} {
		t.Run(name, func(t *testing.T) {
			b := formatstest.ReadTestdata(t, name)
			x, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			var offs []int64
			sc := bufio.NewScanner(bytes.NewReader(b))
			sc.Buffer(nil, 1<<20)
			for off := int64(0); sc.Scan(); off += int64(len(sc.Bytes())) + 1 {
				lines, offs = append(lines, sc.Text()), append(offs, off)
			}
			if len(x.Arrays) == 0 {
				t.Fatal("no arrays")
			}
			for _, a := range x.Arrays {
				if l := lines[a.Line-1]; !strings.HasPrefix(l, "arr name="+a.Name+" ") || offs[a.Line-1] != a.Start {
					t.Errorf("array %s: line %d at %d is %.40q at %d", a.Name, a.Line, a.Start, l, offs[a.Line-1])
				}
				if a.End > int64(len(b)) || string(b[a.End-7:a.End]) != "endarr\n" {
					t.Errorf("array %s: End %d is not after endarr", a.Name, a.End)
				}
				for _, c := range a.Chunks {
					l := lines[c.Line-1]
					if !strings.HasPrefix(l, "ch ix=") || offs[c.Line-1] != c.Start || offs[c.Line] != c.Data || string(b[c.End-6:c.End]) != "endch\n" {
						t.Errorf("array %s chunk %d: line %d at %d/%d/%d", a.Name, c.IX, c.Line, c.Start, c.Data, c.End)
					}
				}
			}
		})
	}
	if _, err := ReadIndex(context.Background(), "x", snapshot.Bytes("WTXT 1\n"), 7); err == nil {
		t.Error("a header-only file indexed")
	}
}
