package reviewtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaFile is the OpenAPI fragment file with the request schemas:
// $SNAPD_GITHUB_OPENAPI, else ../shared/github-openapi/compact-operations.json
// beside the module root.
func SchemaFile() string {
	if p := os.Getenv("SNAPD_GITHUB_OPENAPI"); p != "" {
		return p
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "..", "shared", "github-openapi", "compact-operations.json")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "compact-operations.json")
		}
	}
}

// operation is one API operation with its compiled request schema.
type operation struct {
	id, method string
	path       *regexp.Regexp
	required   bool
	schema     *jsonschema.Schema // nil: no request body
}

func loadOperations(file string) ([]operation, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("GitHub OpenAPI fragments: %w", err)
	}
	var raw map[string]struct {
		Method      string `json:"method"`
		Path        string `json:"path"`
		RequestBody *struct {
			Required bool            `json:"required"`
			Schema   json.RawMessage `json:"schema"`
		} `json:"request_body"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var ops []operation
	for id, o := range raw {
		re := "^" + regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(o.Path), `[^/]+`) + "$"
		if strings.HasSuffix(o.Path, "{path}") {
			re = "^" + regexp.QuoteMeta(strings.TrimSuffix(o.Path, "{path}")) + ".+$"
			re = regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(re, `[^/]+`)
		}
		op := operation{id: id, method: o.Method, path: regexp.MustCompile(re)}
		if o.RequestBody != nil {
			op.required = o.RequestBody.Required
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(o.RequestBody.Schema))
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, id, err)
			}
			c := jsonschema.NewCompiler()
			loc := "mem:///" + strings.ReplaceAll(id, "/", "_") + ".json"
			if err := c.AddResource(loc, doc); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, id, err)
			}
			if op.schema, err = c.Compile(loc); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, id, err)
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// checkSchema validates a request body against its operation's schema. It
// returns the operation id ("" when the server knows no schema for the
// request) and a problem ("" when the body conforms).
func (s *Server) checkSchema(r *http.Request, body []byte) (string, string) {
	for _, op := range s.ops {
		if op.method != r.Method || !op.path.MatchString(r.URL.Path) {
			continue
		}
		if op.schema == nil {
			if len(bytes.TrimSpace(body)) > 0 {
				return op.id, "this operation takes no request body"
			}
			return op.id, ""
		}
		if len(bytes.TrimSpace(body)) == 0 {
			if op.required {
				return op.id, "the request body is required"
			}
			return op.id, ""
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err != nil {
			return op.id, "the body is not JSON: " + err.Error()
		}
		if err := op.schema.Validate(v); err != nil {
			return op.id, err.Error()
		}
		return op.id, ""
	}
	return "", ""
}
