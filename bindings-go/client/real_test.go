//go:build cgo

package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/client"
)

// The wall clock is what is tested: polylimit's middleware (1 request per 1 s
// window) answers 429 with Retry-After: 1, the transport waits it out and the
// retry succeeds; with a budget under the wait the 429 comes back at once.
func TestRealServer429WaitThenSuccessAndBudgetExceeded(t *testing.T) {
	l, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Algorithm: "fixed_window", Rate: "1/s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(l.Middleware()(ok))
	defer srv.Close()

	get := func(c *http.Client) (int, string, string) {
		t.Helper()
		res, err := c.Get(srv.URL + "/api/x")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Retry-After"), string(body)
	}

	retrying := &http.Client{Transport: &client.RetryTransport{Jitter: -1, MaxRetries: 2}}
	if status, _, _ := get(retrying); status != 200 {
		t.Fatalf("first request: %d", status)
	}
	started := time.Now()
	status, _, body := get(retrying)
	if elapsed := time.Since(started); status != 200 || body != "ok" || elapsed < 300*time.Millisecond || elapsed > 2500*time.Millisecond {
		t.Fatalf("second request: %d %q after %v", status, body, elapsed)
	}

	// Budget 0.5 s < Retry-After 1 s. Drain the window first; try again in
	// the rare case that the window turned between the drain and the request.
	budgeted := &http.Client{Transport: &client.RetryTransport{Jitter: -1, Budget: 500 * time.Millisecond}}
	for try := 0; try < 3; try++ {
		for {
			if s, _, _ := get(http.DefaultClient); s == 429 {
				break
			}
		}
		started = time.Now()
		var retryAfter string
		status, retryAfter, _ = get(budgeted)
		if status == 429 {
			// At once: short of the 1 s Retry-After it would have waited out.
			if retryAfter != "1" || time.Since(started) >= time.Second {
				t.Fatalf("budget: Retry-After %q after %v", retryAfter, time.Since(started))
			}
			return
		}
	}
	t.Fatalf("budget: never refused (%d)", status)
}
