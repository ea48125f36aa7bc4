package aero

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

// TestMsgpackPythonLayout checks the encoder against the byte forms
// msgpack-python (use_bin_type=True) writes (FORMATS-notes.md 3.4).
func TestMsgpackPythonLayout(t *testing.T) {
	neg := func(i int64) mval { return mval{kind: kInt, i: i} }
	cases := []struct {
		v    mval
		want string
	}{
		{mUint(0), "00"}, {mUint(127), "7f"}, {mUint(128), "cc80"}, {mUint(255), "ccff"},
		{mUint(256), "cd0100"}, {mUint(65535), "cdffff"}, {mUint(65536), "ce00010000"},
		{mUint(4194304), "ce00400000"}, {mUint(math.MaxUint32), "ceffffffff"},
		{mUint(1 << 32), "cf0000000100000000"}, {mUint(math.MaxUint64), "cfffffffffffffffff"},
		{neg(-1), "ff"}, {neg(-32), "e0"}, {neg(-33), "d0df"}, {neg(-128), "d080"}, {neg(-129), "d1ff7f"},
		{neg(-32768), "d18000"}, {neg(-32769), "d2ffff7fff"}, {neg(math.MinInt32), "d280000000"},
		{neg(math.MinInt32 - 1), "d3ffffffff7fffffff"}, {neg(math.MinInt64), "d38000000000000000"},
		{mStr(""), "a0"}, {mStr(strings.Repeat("a", 31)), "bf" + strings.Repeat("61", 31)},
		{mStr(strings.Repeat("a", 32)), "d920" + strings.Repeat("61", 32)},
		{mStr(strings.Repeat("a", 255)), "d9ff" + strings.Repeat("61", 255)},
		{mStr(strings.Repeat("a", 256)), "da0100" + strings.Repeat("61", 256)},
		{mStr(strings.Repeat("a", 65536)), "db00010000" + strings.Repeat("61", 65536)},
		{mBin(nil), "c400"}, {mBin([]byte{1, 2}), "c4020102"},
		{mBin(make([]byte, 256)), "c50100" + strings.Repeat("00", 256)},
		{mBin(make([]byte, 65536)), "c600010000" + strings.Repeat("00", 65536)},
		{mArr(), "90"}, {mArr(make([]mval, 15)...), "9f" + strings.Repeat("c0", 15)},
		{mArr(make([]mval, 16)...), "dc0010" + strings.Repeat("c0", 16)},
		{mArr(make([]mval, 65536)...), "dd00010000" + strings.Repeat("c0", 65536)},
		{mMap(), "80"}, {mMap(make([]mpair, 15)...), "8f" + strings.Repeat("c0c0", 15)},
		{mMap(make([]mpair, 16)...), "de0010" + strings.Repeat("c0c0", 16)},
		{mMap(make([]mpair, 65536)...), "df00010000" + strings.Repeat("c0c0", 65536)},
		{mBool(true), "c3"}, {mBool(false), "c2"}, {mval{}, "c0"},
		{mval{kind: kFloat, f: 1.5}, "cb3ff8000000000000"},
		{mMap(kv("b", mUint(1)), kv("a", mUint(2))), "82a16201a16102"}, // insertion order
	}
	for _, c := range cases {
		got := hex.EncodeToString(encodeMval(c.v))
		if got != c.want {
			t.Errorf("%s: got %s, want %s", toTypedJSON(c.v)[:min(40, len(toTypedJSON(c.v)))], got[:min(60, len(got))], c.want[:min(60, len(c.want))])
		}
		// And the decoder reads it back to the same value.
		back, err := decodeOne(encodeMval(c.v))
		if err != nil {
			t.Errorf("decode %s: %v", c.want[:min(20, len(c.want))], err)
			continue
		}
		if !bytes.Equal(encodeMval(back), encodeMval(c.v)) {
			t.Errorf("decode/encode of %s differs", c.want[:min(20, len(c.want))])
		}
	}
}

// TestMsgpackReadsOtherForms: non-minimal integers, float32 and signed
// encodings of non-negative values are read (and normalised).
func TestMsgpackReadsOtherForms(t *testing.T) {
	cases := map[string]string{
		"d300000000000000ff": "255", "d000": "0", "cd0001": "1", "ca3fc00000": "1.5", "cb3ff0000000000000": "1.0",
		"c0": "null", "82a16101a1620a": `{"a":1,"b":10}`, "8101a162": `{"$map":[[1,"b"]]}`,
		"82a161c3a161c2": `{"$map":[["a",true],["a",false]]}`, "c40100": `{"$bin":"AA=="}`,
		"cb7ff8000000000001": `{"$float":"NaN"}`, "cbfff0000000000000": `{"$float":"-Inf"}`,
		"81a22478c0": `{"$map":[["$x",null]]}`, "cb4415af1d78b58c40": "1e+20",
	}
	for in, want := range cases {
		b, _ := hex.DecodeString(in)
		v, err := decodeOne(b)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := toTypedJSON(v); got != want {
			t.Errorf("%s: typed JSON %s, want %s", in, got, want)
		}
		back, err := fromTypedJSON(want)
		if err != nil {
			t.Errorf("%s: %v", want, err)
			continue
		}
		if toTypedJSON(back) != want {
			t.Errorf("typed JSON %s does not round trip: %s", want, toTypedJSON(back))
		}
	}
}

func TestMsgpackRejects(t *testing.T) {
	for _, in := range []string{
		"", "c1", "d4000000", "c7", "dbffffffff", "ddffffffff", "dfffffffff", "a2ff", "a3616263ff", "92", "81a161",
		"a16100", // extra data
		"d9", "c5ff", "cf00",
		strings.Repeat("91", 200) + "c0", // too deep
	} {
		b, _ := hex.DecodeString(in)
		if _, err := decodeOne(b); err == nil {
			t.Errorf("%s: decoded", in)
		}
	}
}

func TestTypedJSONRejects(t *testing.T) {
	for _, in := range []string{
		`{"$bin":1}`, `{"$bin":"!"}`, `{"$float":"x"}`, `{"$map":[1]}`, `{"$what":1}`, `{"a":1,"$bin":"AA=="}`,
		`{"$bin":"AA==","a":1}`, `{"a":1,"a":2}`, `1 2`, `99999999999999999999`, `-99999999999999999999`, `[`,
		strings.Repeat("[", 100) + strings.Repeat("]", 100),
	} {
		if _, err := fromTypedJSON(in); err == nil {
			t.Errorf("%s: parsed", in)
		}
	}
	// Strings with every escape survive.
	v := mStr("q\"b\\n\n\r\t\x01<>&é😀")
	back, err := fromTypedJSON(toTypedJSON(v))
	if err != nil || back.s != v.s {
		t.Errorf("string round trip: %v %q", err, back.s)
	}
}
