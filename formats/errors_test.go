package formats

import (
	"errors"
	"testing"
)

func TestErrorMessage(t *testing.T) {
	corrupt := Kind("malformed X file", ErrCorrupt)
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"all parts", &Error{Format: "x", File: "a.x", Part: `member "m"`, Tensor: "w", Offset: 12, Check: "bad size", Err: corrupt},
			`x: a.x: member "m": tensor "w": offset 12: bad size (malformed X file)`},
		{"no offset, detail", &Error{Format: "x", Offset: -1, Check: "blake3", Detail: "is 00, TOC says 11", Err: corrupt},
			`x: blake3: is 00, TOC says 11 (malformed X file)`},
		{"file around an error", &Error{File: "a.x", Offset: -1, Err: errors.New("x: malformed: y")},
			`a.x: x: malformed: y`},
		{"no file", &Error{Offset: -1, Err: errors.New("x: malformed: y")}, `x: malformed: y`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if tt.err.Err != nil && !errors.Is(tt.err, tt.err.Err) {
				t.Errorf("does not unwrap to its Err")
			}
		})
	}
	if !errors.Is(tests[0].err, ErrCorrupt) {
		t.Error("not ErrCorrupt through the codec's Kind")
	}
}
