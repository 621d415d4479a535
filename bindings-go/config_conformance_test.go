package polylimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"
)

// configCase is one case of tests/conformance/config/*.json; the Rust runner
// (core/tests/config_conformance.rs) defines what it means.
type configCase struct {
	Name    string                     `json:"name"`
	Env     map[string]string          `json:"env"`
	Rules   json.RawMessage            `json:"rules"`
	Options map[string]json.RawMessage `json:"options"`
	Expect  struct {
		Config json.RawMessage `json:"config"`
		Error  *struct {
			Kind  string          `json:"kind"`
			Field json.RawMessage `json:"field"`
		} `json:"error"`
	} `json:"expect"`
}

// goOptions is the Options a case gives Go, or false when the case is
// written for other languages only. Rules files are named relative to dir.
func (c *configCase) goOptions(t *testing.T, dir string) (Options, bool) {
	t.Helper()
	var opts Options
	if c.Options != nil {
		raw, ok := c.Options["go"]
		if !ok {
			return opts, false
		}
		// A field Go does not have fails the run, not the case.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&opts); err != nil {
			t.Fatalf("%q: options.go: %v", c.Name, err)
		}
	}
	if len(c.Rules) > 0 {
		var text string
		if err := json.Unmarshal(c.Rules, &text); err != nil {
			// A rules object: its JSON text, keys in the vector's order.
			var compact bytes.Buffer
			if err := json.Compact(&compact, c.Rules); err != nil {
				t.Fatalf("%q: rules: %v", c.Name, err)
			}
			text = compact.String()
		}
		opts.Rules = text
	}
	if opts.RulesFile != "" {
		opts.RulesFile = filepath.Join(dir, opts.RulesFile)
	}
	return opts, true
}

// containsJSON reports where expected is not found in actual: objects by the
// keys expected lists, lists item by item, anything else equal.
func containsJSON(actual, expected any, path string) error {
	switch e := expected.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: got %v, expected an object %v", path, actual, expected)
		}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			av, ok := a[k]
			if !ok {
				return fmt.Errorf("%s.%s is missing in %v", path, k, actual)
			}
			if err := containsJSON(av, e[k], path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		a, ok := actual.([]any)
		if !ok || len(a) != len(e) {
			return fmt.Errorf("%s: got %v, expected %v", path, actual, expected)
		}
		for i := range e {
			if err := containsJSON(a[i], e[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	default:
		if !reflect.DeepEqual(actual, expected) {
			return fmt.Errorf("%s: got %v, expected %v", path, actual, expected)
		}
		return nil
	}
}

// expectedField is the field a case's error names for Go: one path for
// every language, or {"snake", "camel", "go"}.
func expectedField(raw json.RawMessage) (string, error) {
	var field string
	if err := json.Unmarshal(raw, &field); err == nil {
		return field, nil
	}
	var per map[string]string
	if err := json.Unmarshal(raw, &per); err != nil {
		return "", err
	}
	field, ok := per["go"]
	if !ok {
		return "", fmt.Errorf("no go field in %s", raw)
	}
	return field, nil
}

func runConfigCase(t *testing.T, c *configCase, opts Options) error {
	for k, v := range c.Env {
		// cgo programs set the C environment too, where the core reads ${NAME}.
		t.Setenv(k, v)
	}
	got, err := EffectiveConfig(opts)
	switch {
	case c.Expect.Config != nil && c.Expect.Error == nil:
		if err != nil {
			return fmt.Errorf("error %v", err)
		}
		var want any
		if err := json.Unmarshal(c.Expect.Config, &want); err != nil {
			return err
		}
		return containsJSON(any(got), want, "config")
	case c.Expect.Config == nil && c.Expect.Error != nil:
		field, ferr := expectedField(c.Expect.Error.Field)
		if ferr != nil {
			return ferr
		}
		var ce *ConfigError
		if c.Expect.Error.Kind != "config" {
			return fmt.Errorf("an error of kind %q: the runner knows config errors only", c.Expect.Error.Kind)
		}
		if err == nil {
			return fmt.Errorf("built %v, expected an error for %s", got, field)
		}
		if !errors.As(err, &ce) || ce.Field != field {
			return fmt.Errorf("error %#v (%v), expected one for field %s", err, err, field)
		}
		return nil
	default:
		return errors.New("a case expects a config or an error")
	}
}

func TestConfigConformanceVectors(t *testing.T) {
	dir := filepath.Join(vectorDir(), "config")
	files := map[string]*struct{ Cases []configCase }{}
	names := vectorFiles(t, "config", func(name string) any {
		files[name] = &struct{ Cases []configCase }{}
		return files[name]
	})
	runs := 0
	for _, name := range names {
		for i := range files[name].Cases {
			c := &files[name].Cases[i]
			opts, ok := c.goOptions(t, dir)
			if !ok {
				continue
			}
			runs++
			t.Run(name+": "+c.Name, func(t *testing.T) {
				if err := runConfigCase(t, c, opts); err != nil {
					t.Error(err)
				}
			})
		}
	}
	// Most cases give Go options; a drop means vectors lost their Go variant.
	if runs < 30 {
		t.Fatalf("%d configuration vectors ran for Go, want at least 30", runs)
	}
	t.Logf("%d configuration vectors ran for Go", runs)
}

// The effective configuration loads back, as a rules document, to itself.
func TestEffectiveConfigLoadsBackAsItself(t *testing.T) {
	opts := Options{
		Policies: []Policy{
			{Name: "a", Rate: "5/s", Penalty: &Penalty{Threshold: 2, Within: 60e9, Cooldowns: []time.Duration{10e9}}},
			{Name: "b", Algorithm: "leaky_bucket", Mode: "shape", Rate: "1/s"},
		},
		KeyBy: []string{"user"}, TrustedProxies: []string{"unix"}, Headers: "ietf", Cooldown: 5e9,
	}
	first, err := EffectiveConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	text, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EffectiveConfig(Options{Rules: string(text)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("first %v\nagain %v", first, again)
	}
	if first["cooldown"] != "5000ms" || first["headers"] != "ietf" {
		t.Fatalf("%v", first)
	}
	l, err := New(Options{Rules: string(text)})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// The vectors' env values reach the core through os.Setenv.
func TestSetenvReachesTheCore(t *testing.T) {
	t.Setenv("POLYLIMIT_T_GO_BURST", "11")
	got, err := EffectiveConfig(Options{Rules: "policies: { api: { rate: 1/s, burst: ${POLYLIMIT_T_GO_BURST} } }\n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := containsJSON(got, map[string]any{"policies": map[string]any{"api": map[string]any{"burst": 11.0}}}, "config"); err != nil {
		t.Fatal(err)
	}
}
