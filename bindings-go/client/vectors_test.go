package client

import (
	"encoding/json"
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
			} `json:"options"`
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
			t.Errorf("parse %q: got %v %v, want %v", value, got, ok, c.WaitMs)
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
			Budget: time.Duration(o.BudgetMs) * time.Millisecond, Jitter: jitter, Statuses: o.Statuses,
			Now: func() time.Time { return now }, Rand: func() float64 { return c.Random },
		}
		resp := &http.Response{StatusCode: c.Status, Header: http.Header{}}
		if c.RetryAfter != nil {
			resp.Header.Set("Retry-After", *c.RetryAfter)
		}
		got, ok := rt.wait(resp, c.Retries, now.Add(-time.Duration(c.ElapsedMs)*time.Millisecond))
		if ok != (c.WaitMs != nil) ||
			(ok && math.Abs(float64(got)/float64(time.Millisecond)-*c.WaitMs) > 1e-3) {
			t.Errorf("%s: got %v %v, want %v", c.Name, got, ok, c.WaitMs)
		}
	}
}
