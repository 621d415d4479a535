package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSharedVectors plays tests/conformance/client/retry_after.json, which
// the Python and JavaScript helpers play too.
func TestSharedVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "tests", "conformance", "client", "retry_after.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		NowMs int64 `json:"now_ms"`
		Parse []struct {
			Value  *string `json:"value"`
			WaitMs *int64  `json:"wait_ms"`
		} `json:"parse"`
		Decide []struct {
			Name    string `json:"name"`
			Options struct {
				MaxRetries int     `json:"max_retries"`
				MaxWaitMs  int64   `json:"max_wait_ms"`
				BudgetMs   int64   `json:"budget_ms"`
				Jitter     float64 `json:"jitter"`
				Statuses   []int   `json:"statuses"`

				RetryNonIdempotent bool `json:"retry_non_idempotent"`
			} `json:"options"`
			Method     string   `json:"method"`
			Status     int      `json:"status"`
			RetryAfter *string  `json:"retry_after"`
			Retries    int      `json:"retries"`
			ElapsedMs  int64    `json:"elapsed_ms"`
			Random     float64  `json:"random"`
			WaitMs     *float64 `json:"wait_ms"`
		} `json:"decide"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(v.NowMs)
	for _, c := range v.Parse {
		value := ""
		if c.Value != nil {
			value = *c.Value
		}
		got, ok := ParseRetryAfter(value, now)
		if ok != (c.WaitMs != nil) || (ok && got != time.Duration(*c.WaitMs)*time.Millisecond) {
			t.Errorf("parse %q: got %v %v, want %s", value, got, ok, wantMs(c.WaitMs))
		}
	}
	for _, c := range v.Decide {
		o := c.Options
		// The zero value means "default" in Go: -1 says "none" for a 0 in the vectors.
		jitter := o.Jitter
		if jitter == 0 {
			jitter = -1
		}
		rt := &RetryTransport{
			MaxRetries: o.MaxRetries, MaxWait: time.Duration(o.MaxWaitMs) * time.Millisecond,
			Budget: time.Duration(o.BudgetMs) * time.Millisecond, Jitter: jitter, Statuses: o.Statuses, RetryNonIdempotent: o.RetryNonIdempotent,
			Now: func() time.Time { return now }, Rand: func() float64 { return c.Random },
		}
		resp := &http.Response{StatusCode: c.Status, Header: http.Header{}}
		if c.RetryAfter != nil {
			resp.Header.Set("Retry-After", *c.RetryAfter)
		}
		got, ok := rt.wait(c.Method, resp, c.Retries, now.Add(-time.Duration(c.ElapsedMs)*time.Millisecond))
		if ok != (c.WaitMs != nil) ||
			(ok && math.Abs(float64(got)/float64(time.Millisecond)-*c.WaitMs) > 1e-3) {
			t.Errorf("%s: got %v %v, want %s", c.Name, got, ok, wantMs(c.WaitMs))
		}
	}
}

// TestOptionVectors plays the Go cases of
// tests/conformance/client/retry_options.json: RoundTrip returns the core's
// error, naming the field and value, before any request is sent.
func TestOptionVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "tests", "conformance", "client", "retry_options.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Invalid []struct {
			Naming  string          `json:"naming"`
			Options json.RawMessage `json:"options"`
			Error   string          `json:"error"`
		} `json:"invalid"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	played := 0
	for _, c := range v.Invalid {
		if c.Naming != "go" {
			continue
		}
		played++
		sent := 0
		rt := &RetryTransport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			sent++
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
		})}
		dec := json.NewDecoder(bytes.NewReader(c.Options))
		dec.DisallowUnknownFields()
		if err := dec.Decode(rt); err != nil {
			t.Fatalf("%s: %v", c.Options, err)
		}
		req, _ := http.NewRequest("GET", "http://api/x", nil)
		resp, err := rt.RoundTrip(req)
		if resp != nil || err == nil || err.Error() != c.Error || sent != 0 {
			t.Errorf("%s: got %v %v (%d sent), want %q", c.Options, resp, err, sent, c.Error)
		}
	}
	if played == 0 {
		t.Fatal("no Go cases")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wantMs shows a vector's wait_ms (null: give up).
func wantMs[T int64 | float64](ms *T) string {
	if ms == nil {
		return "none"
	}
	return fmt.Sprintf("%vms", *ms)
}

// TestDefaultVectors: the Default* variables are the core's defaults, as
// tests/conformance/client/retry_options.json gives them in Go's units.
func TestDefaultVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "tests", "conformance", "client", "retry_options.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Defaults struct {
			Go struct {
				MaxRetries         int
				MaxWait, Budget    time.Duration
				Jitter             float64
				Statuses           []int
				RetryNonIdempotent bool
			} `json:"go"`
		} `json:"defaults"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	want := v.Defaults.Go
	got := fmt.Sprint(DefaultMaxRetries, DefaultMaxWait, DefaultBudget, DefaultJitter, DefaultStatuses, false)
	if exp := fmt.Sprint(want.MaxRetries, want.MaxWait, want.Budget, want.Jitter, want.Statuses, want.RetryNonIdempotent); got != exp || want.MaxRetries == 0 {
		t.Fatalf("defaults %s, want %s", got, exp)
	}
}
