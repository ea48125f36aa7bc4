// Package jsonerr describes encoding/json errors without the input's bytes.
//
// encoding/json's errors quote the JSON they refuse: a SyntaxError names
// the offending character ("invalid character 'E' looking for beginning
// of value"), an UnmarshalTypeError may carry a number's literal text
// ("number 1e999"), DisallowUnknownFields reports `json: unknown field
// "KEY"` with the key verbatim, and the ",string" option and json.Number
// quote the value they refuse. Where the JSON comes from a checkpoint, a
// registry or a repository (hostile input), such a message must not reach
// an error: Describe (and DescribeDecoder, for a json.Decoder read token
// by token) keeps the position and the kind of failure and drops the
// text.
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// Error is an encoding/json failure described without the input's bytes.
// Its message is one of
//
//	malformed JSON at byte N
//	truncated JSON [at byte N]
//	no JSON value
//	wrong JSON type for FIELD at byte N (KIND, want GOTYPE)
//	unknown key (N bytes)
//	invalid JSON value
//
// where FIELD is the Go-side field path from the decoded value's root:
// the JSON names of the struct fields encoding/json descended into, as
// the Go types declare them (a map's keys are not recorded, so never a
// key of the input), KIND is the JSON kind
// the input holds (string, number, bool, null, array, object) and N a
// byte offset in the JSON text (see Offset). Unwrap returns the original
// error, so errors.Is(err, io.ErrUnexpectedEOF) and errors.As for
// *json.SyntaxError keep working; its message must not be shown.
type Error struct {
	// Offset is the byte offset the failure concerns, counted from the
	// start of the text given to json.Unmarshal or to a json.Decoder
	// (plus the base of DescribeAt), or -1 when encoding/json gives none:
	// the byte that breaks the syntax, the end of a truncated text; for a
	// wrong type encoding/json's offset, just past a literal value or
	// just past the '[' or '{' of an array or object (a json.Decoder's
	// count from the start of the value Decode read).
	Offset int64
	msg    string // the message without the offset
	suffix string // printed after the offset
	err    error
}

func (e *Error) Error() string {
	if e.Offset < 0 {
		return e.msg + e.suffix
	}
	return e.msg + " at byte " + strconv.FormatInt(e.Offset, 10) + e.suffix
}

// Unwrap returns the encoding/json error (or the error of an
// Unmarshaler) that e describes.
func (e *Error) Unwrap() error { return e.err }

// Describe returns err described without any of the input's bytes, as an
// *Error; nil for nil. An error that already is an *Error is returned as
// it is. Errors encoding/json does not document (an Unmarshaler's or a
// TextUnmarshaler's own, the ",string" option's) become "invalid JSON
// value": their text may quote the input.
//
// Describe is for the errors of json.Unmarshal and of a json.Decoder's
// first Decode; a decoder that has returned tokens or values before
// needs DescribeDecoder for a true offset.
func Describe(err error) error {
	return DescribeAt(err, 0)
}

// DescribeAt is Describe for JSON text that starts at byte base of a
// larger input: base is added to every offset, so the message names the
// position in that input (a header at byte 8 of a file, a value cut
// out of a larger text and given to json.Unmarshal).
func DescribeAt(err error, base int64) error {
	if err == nil {
		return nil
	}
	var je *Error
	if errors.As(err, &je) {
		return err
	}
	e := &Error{Offset: -1, err: err}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// The scanner counts the offending byte as read.
		e.Offset = base + max(se.Offset-1, 0)
		e.msg = "malformed JSON"
		if strings.HasPrefix(se.Error(), "unexpected end of JSON input") {
			e.Offset = base + se.Offset
			e.msg = "truncated JSON"
		}
	case errors.As(err, &te):
		e.Offset = base + te.Offset
		e.msg = "wrong JSON type"
		if te.Field != "" {
			e.msg += " for " + te.Field
		}
		// Value is "number 1e999" for some numbers: only the kind.
		kind, _, _ := strings.Cut(te.Value, " ")
		e.suffix = " (" + kind
		if te.Type != nil {
			e.suffix += ", want " + te.Type.String()
		}
		e.suffix += ")"
	case errors.Is(err, io.ErrUnexpectedEOF):
		e.msg = "truncated JSON"
	case errors.Is(err, io.EOF):
		e.msg = "no JSON value"
	default:
		if n, ok := unknownField(err.Error()); ok {
			e.msg = "unknown key (" + strconv.Itoa(n) + " bytes)"
		} else {
			e.msg = "invalid JSON value"
		}
	}
	return e
}

// DescribeDecoder is DescribeAt for err, an error of dec.Token or
// dec.Decode, where dec reads src (whose first byte is byte base of the
// larger input) and has already returned tokens or values. encoding/json
// counts such a syntax error's offset over the bytes its Decode calls
// scanned, not over the input, or reports where the failing token
// starts: the offending byte is found again by rescanning src from the
// failed call's position (at most the one value that failed).
func DescribeDecoder(dec *json.Decoder, src []byte, base int64, err error) error {
	var je *Error
	var se *json.SyntaxError
	if err == nil || errors.As(err, &je) || !errors.As(err, &se) {
		return DescribeAt(err, base)
	}
	start := dec.InputOffset()
	if start < 0 || start > int64(len(src)) {
		return DescribeAt(err, base)
	}
	var raw json.RawMessage
	rerr := json.NewDecoder(bytes.NewReader(src[start:])).Decode(&raw)
	var rse *json.SyntaxError
	if errors.As(rerr, &rse) {
		d := DescribeAt(rse, base+start).(*Error)
		d.err = err
		return d
	}
	// The token at start is well-formed but not allowed there (a value
	// where a key or ':' belongs): it is the offending byte.
	return &Error{Offset: base + start, msg: "malformed JSON", err: err}
}

// unknownField recognises DisallowUnknownFields' `json: unknown field
// "KEY"` and returns the key's length in bytes.
func unknownField(msg string) (int, bool) {
	const prefix = "json: unknown field "
	if !strings.HasPrefix(msg, prefix) {
		return 0, false
	}
	key, err := strconv.Unquote(msg[len(prefix):])
	if err != nil {
		return 0, true
	}
	return len(key), true
}
