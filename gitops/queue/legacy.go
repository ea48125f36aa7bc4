package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// legacyKeys are the keys of publish with which the format before
// Publish.State recorded the Publisher's progress, in the order that
// format wrote them. Its only Publisher wrote them all at once, after its
// upload: a job that has them has sent its bytes.
var legacyKeys = []string{"repository", "manifest", "skeleton", "uploaded_bytes", "skipped_bytes"}

// publishKeys is Publish without its UnmarshalJSON: every current key.
type publishKeys Publish

// publishFile is Publish as a job file holds it: the current keys (all of
// Publish's, embedded, so a key added there is read here too) and the
// legacy progress keys, decoded strictly (any other key is refused).
type publishFile struct {
	publishKeys

	Repository    json.RawMessage `json:"repository,omitempty"`
	Manifest      json.RawMessage `json:"manifest,omitempty"`
	Skeleton      json.RawMessage `json:"skeleton,omitempty"`
	UploadedBytes json.RawMessage `json:"uploaded_bytes,omitempty"`
	SkippedBytes  json.RawMessage `json:"skipped_bytes,omitempty"`
}

// UnmarshalJSON reads publish strictly, in the current format or the
// format before State: there, the legacy progress keys present become
// State, an object with the same keys and values (what the Publisher of
// that format reads back), and a non-empty manifest sets Sent (the rule by
// which that format's Status counted pending bytes). A file with both
// State and legacy keys is refused.
func (p *Publish) UnmarshalJSON(b []byte) error {
	var f publishFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return err
	}
	*p = Publish(f.publishKeys)
	legacy := []json.RawMessage{f.Repository, f.Manifest, f.Skeleton, f.UploadedBytes, f.SkippedBytes}
	var state bytes.Buffer
	for i, v := range legacy {
		if len(v) == 0 || bytes.Equal(v, []byte("null")) {
			continue
		}
		if len(f.State) > 0 {
			return fmt.Errorf("publish has both state and the key %q of the format before it", legacyKeys[i])
		}
		if state.Len() == 0 {
			state.WriteByte('{')
		} else {
			state.WriteByte(',')
		}
		k, _ := json.Marshal(legacyKeys[i])
		state.Write(k)
		state.WriteByte(':')
		state.Write(v)
	}
	if state.Len() > 0 {
		state.WriteByte('}')
		p.State = json.RawMessage(state.Bytes())
		var m string
		p.Sent = p.Sent || (json.Unmarshal(f.Manifest, &m) == nil && m != "")
	}
	return nil
}
