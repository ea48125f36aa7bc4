package fold

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"testing"
)

func TestPyFloat(t *testing.T) {
	cases := map[float64]string{
		0:                     "0.0",
		math.Copysign(0, -1):  "-0.0",
		1:                     "1.0",
		0.25:                  "0.25",
		1e16:                  "1e+16",
		1e-5:                  "1e-05",
		1.2345678901234568e17: "1.2345678901234568e+17",
		2.5e-7:                "2.5e-07",
		1795338452.409079:     "1795338452.409079",
		1e15:                  "1000000000000000.0",
		0.0001:                "0.0001",
		100000:                "100000.0",
		-1.5e300:              "-1.5e+300",
		5e-324:                "5e-324",
		math.NaN():            "NaN",
		math.Inf(1):           "Infinity",
		math.Inf(-1):          "-Infinity",
		123.456:               "123.456",
		9999999999999998:      "9999999999999998.0",
	}
	for f, want := range cases {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestCanonicalExample(t *testing.T) {
	v, err := parseJSON([]byte(`{"b":1,"a":{"d":true,"c":null},"é":[1.0,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":{"c":null,"d":true},"b":1,"\u00e9":[1.0,2]}`
	if got := canonicalJSON(v); got != want {
		t.Fatalf("canonical %s, want %s", got, want)
	}
}

func TestJSONEscapes(t *testing.T) {
	v, err := parseJSON([]byte(`{"s":"a\"b\\c\b\f\n\r\t\u0001\u007f/<>&\u2028\u00e9\ud83d\ude00","n":1e5,"big":123456789012345678901234567890,"neg":-0}`))
	if err != nil {
		t.Fatal(err)
	}
	wantIndex := "{\"s\":\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\u007f/<>&\u2028é😀\",\"n\":100000.0,\"big\":123456789012345678901234567890,\"neg\":0}"
	if got := indexJSON(v); got != wantIndex {
		t.Errorf("index form\n got %s\nwant %s", got, wantIndex)
	}
	wantCanon := `{"big":123456789012345678901234567890,"n":100000.0,"neg":0,"s":"a\"b\\c\b\f\n\r\t\u0001\u007f/<>&\u2028\u00e9\ud83d\ude00"}`
	if got := canonicalJSON(v); got != wantCanon {
		t.Errorf("canonical form\n got %s\nwant %s", got, wantCanon)
	}
}

func TestJSONRejects(t *testing.T) {
	for _, s := range []string{``, `{`, `{"a":}`, `[1,]`, `01`, `1.`, `"\x"`, "\"\x01\"", `{"a":1}x`, `nul`, "\xff", `1e`, `[` + string(make([]byte, 0))} {
		if _, err := parseJSON([]byte(s)); err == nil {
			t.Errorf("parseJSON(%q) accepted", s)
		}
	}
	deep := make([]byte, 0, 2000)
	for i := 0; i < 1000; i++ {
		deep = append(deep, '[')
	}
	if _, err := parseJSON(deep); err == nil {
		t.Error("deep nesting accepted")
	}
	v, err := parseJSON([]byte(`{"a":1,"b":2,"a":3}`))
	if err != nil || indexJSON(v) != `{"a":3,"b":2}` {
		t.Errorf("duplicate keys: %v %v", indexJSON(v), err)
	}
}

// TestIndexBytesAndManifestInputs: every fixture's index re-serializes byte
// for byte, and the manifest input matches EXPECTED.md.
func TestIndexBytesAndManifestInputs(t *testing.T) {
	manifest := map[string]string{
		"basic_nocomp.fold":      "65d23ea108774dd59ebc1e523494c227ce103380fd5c04e294c7f583eea135ab",
		"zstd_tsav_npz.fold":     "68659e1b986d57140a940d3abc892fbbfed17ed874d921ab5a5ab03c924f47f2",
		"ecc_rs32_spec_era.mind": "8a0c3ebd1627ddde56e2bcf684b1dd497e650e7e207bd5bc097eb4928ad86bab",
		"ecc_rs32_head.mind":     "fb3d3a1a476db441238517c695443c5f2804ed11dc9ee9cb9f93bbd8073a1853",
	}
	inputs := map[string]string{
		"basic_nocomp.fold":  `{"chunk_hashes":{"llm_manifest":"fbcbab4da210901896d36a3a9e8c274e1d461ae5badf208b59b27e4c63c74e02","nuclear_arrays":"f5cb866e42a3c38f112ab937912a298cb458d32aceb0c46fb10015d515f4cebf"},"model_type":"Fixture","protection":"off","tags":{"k":"v"}}`,
		"ecc_rs32_head.mind": `{"chunk_hashes":{"llm_manifest":"sha256:12f550a4fb7c9490da7c937498b01942975ed955d7cc4ff9fe468e0e2bea573e","nuclear_arrays":"sha256:1bf19ce98c02397e192f6f460922ebdb2812539efb20710b165170ce78582e52"},"model_type":"Fixture","protection":"med","security_features":{"crc32c":true,"ecc":false,"encryption":false,"level":"basic","merkle":false,"provenance":false,"recovery":false,"sha256":true,"sharding":false,"signature":false,"trust_block":false},"security_level":"basic","tags":{}}`,
	}
	for _, fx := range fixtures {
		b := readFixture(t, fx.file)
		off := binary.BigEndian.Uint64(b[12:])
		n := binary.BigEndian.Uint64(b[20:])
		if off+n != uint64(len(b)) {
			t.Fatalf("%s: index does not end at EOF", fx.file)
		}
		raw := b[off : off+n]
		v, err := parseJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := indexJSON(v); got != string(raw) {
			t.Errorf("%s: index re-serialization differs:\n got %s\nwant %s", fx.file, got, raw)
		}
		in := canonicalJSON(v.get("metadata").without("manifest_hash"))
		if want, ok := inputs[fx.file]; ok && in != want {
			t.Errorf("%s: manifest input\n got %s\nwant %s", fx.file, in, want)
		}
		sum := sha256.Sum256([]byte(in))
		if got := hex.EncodeToString(sum[:]); got != manifest[fx.file] {
			t.Errorf("%s: manifest hash %s, want %s", fx.file, got, manifest[fx.file])
		}
	}
}
