package polylimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

// The middleware packs only the headers the rules read and finds the mux's
// route only when a rule reads it (known.go); a reload that makes the rules
// read another header, or the route, is seen from the next request.
func TestMiddlewareReadsWhatTheReloadedRulesRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	byHeader := func(name string) string {
		return "policies:\n  api: { algorithm: fixed_window, rate: 1/min }\nrules:\n  - { key: ['header:" + name + "'], policy: api }\n"
	}
	writeRules(t, path, byHeader("X-Tenant"))
	l := newLimiter(t, Options{RulesFile: path})
	mux := http.NewServeMux()
	mux.HandleFunc("/items/{id}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	h := l.Middleware()(mux)
	status := func(path string, headers ...string) int {
		req := httptest.NewRequest("GET", path, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	expect := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: status %d, want %d", what, got, want)
		}
	}
	expect("tenant a", status("/items/1", "X-Tenant", "a", "X-Team", "red"), 200)
	expect("tenant a again", status("/items/2", "X-Tenant", "a", "X-Team", "blue"), 429)
	expect("tenant b: its own key", status("/items/1", "X-Tenant", "b", "X-Team", "red"), 200)
	if k := l.known.Load(); k == nil || k.headers.Load() == nil || !(*k.headers.Load())["X-Tenant"] || (*k.headers.Load())["X-Team"] {
		t.Fatalf("remembered: %+v", k)
	}

	// Now keyed by X-Team, which the old rules did not read.
	writeRules(t, path, byHeader("X-Team"))
	if err := l.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect("team red", status("/items/1", "X-Tenant", "c", "X-Team", "red"), 200)
	expect("team red again", status("/items/1", "X-Tenant", "d", "X-Team", "red"), 429)
	expect("team blue: its own key", status("/items/1", "X-Tenant", "c", "X-Team", "blue"), 200)

	// Now keyed by the route, which no rule read before: the mux's pattern is found.
	writeRules(t, path, "policies:\n  api: { algorithm: fixed_window, rate: 1/min }\nrules:\n  - { key: [route], policy: api }\n")
	if err := l.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect("the route", status("/items/1"), 200)
	expect("the same route, another id", status("/items/2"), 429)
	expect("no route: a key of its own, then the mux answers", status("/other"), 404)
}

// A Watch reload moves the rules generation as Reload does: the middleware
// packs the header the new rules read from the request after the swap.
func TestMiddlewareReadsWhatTheWatchedRulesRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "policies:\n  api: { algorithm: fixed_window, rate: 1/min }\nrules:\n  - { key: [global], policy: api }\n")
	l := newLimiter(t, Options{RulesFile: path, Watch: 50 * time.Millisecond})
	h := l.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	status := func(run string) int {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("X-Run", run)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if got := []int{status("a"), status("b")}; got[0] != 200 || got[1] != 429 {
		t.Fatalf("one global key: %v", got)
	}
	if k := l.known.Load(); k == nil || k.headers.Load() == nil || (*k.headers.Load())["X-Run"] {
		t.Fatalf("remembered: %+v", k)
	}
	writeRules(t, path, "policies:\n  api: { algorithm: fixed_window, rate: 1/min }\nrules:\n  - { key: ['header:x-run'], policy: api }\n")
	// Each poll asks with a run of its own: allowed once the new rules key by it.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; status(fmt.Sprint("run-", i)) != 200; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the watch did not reload, or X-Run was not packed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := []int{status("c"), status("c"), status("d")}; got[0] != 200 || got[1] != 429 || got[2] != 200 {
		t.Fatalf("keyed by X-Run: %v", got)
	}
}
