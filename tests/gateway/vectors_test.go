package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/polylimit/polylimit/tests/gateway/harness"
)

// The HTTP vectors (tests/conformance/http/README.md), read strictly: a field
// this runner does not know fails the test instead of being dropped.
type vectorFile struct {
	Cases []vectorCase `json:"cases"`
}

type vectorCase struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Rules       map[string]any `json:"rules"`
	Requests    []vectorStep   `json:"requests"`
}

type vectorStep struct {
	Request  *vectorRequest  `json:"request"`
	Peek     bool            `json:"peek"`
	Expect   *vectorExpect   `json:"expect"`
	Complete json.RawMessage `json:"complete"` // present (null included): completed after its response
	Of       *int            `json:"of"`
}

type vectorRequest struct {
	NowMs               *int64          `json:"now_ms"`
	Method              *string         `json:"method"`
	Path                *string         `json:"path"`
	Route               *string         `json:"route"`
	Peer                *string         `json:"peer"`
	Headers             json.RawMessage `json:"headers"`
	User                *string         `json:"user"`
	APIKey              *string         `json:"api_key"`
	Key                 *string         `json:"key"`
	Cost                *uint64         `json:"cost"`
	CaseInsensitive     bool            `json:"case_insensitive"`
	IgnoreTrailingSlash bool            `json:"ignore_trailing_slash"`
}

type vectorExpect struct {
	Status  *int        `json:"status"`
	Headers [][2]string `json:"headers"`
	Body    *string     `json:"body"`
	DelayMs int64       `json:"delay_ms"`
}

// vectorsDir is $POLYLIMIT_VECTORS/http, default tests/conformance/http.
func vectorsDir() string {
	if dir := os.Getenv("POLYLIMIT_VECTORS"); dir != "" {
		return filepath.Join(dir, "http")
	}
	return filepath.Join(harness.Repo(), "tests", "conformance", "http")
}

// loadVectors reads every vector file, by file name.
func loadVectors(t *testing.T) map[string]vectorFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorsDir(), "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no HTTP vectors in %s (%v)", vectorsDir(), err)
	}
	files := map[string]vectorFile{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var f vectorFile
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		if len(f.Cases) == 0 {
			t.Fatalf("%s: no cases", filepath.Base(path))
		}
		files[filepath.Base(path)] = f
	}
	return files
}

// sortedNames are the map's keys in order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// headerPairs reads a request's headers: an object or a list of [name, value].
func (r *vectorRequest) headerPairs() ([][2]string, error) {
	if len(r.Headers) == 0 || string(r.Headers) == "null" {
		return nil, nil
	}
	var list [][2]string
	if err := json.Unmarshal(r.Headers, &list); err == nil {
		return list, nil
	}
	// An object: its fields in the order written.
	dec := json.NewDecoder(bytes.NewReader(r.Headers))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("headers %s: not an object or a list of [name, value]", r.Headers)
	}
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var value string
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("headers.%v: %w", name, err)
		}
		list = append(list, [2]string{name.(string), value})
	}
	return list, nil
}

// stepRange prints step indexes as ranges: "0, 2-5".
func stepRange(steps []int) string {
	var parts []string
	for i := 0; i < len(steps); {
		j := i
		for j+1 < len(steps) && steps[j+1] == steps[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(steps[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", steps[i], steps[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
