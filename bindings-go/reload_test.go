package polylimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Reload (issue 38): Reload reads the rules file again and swaps the rules at
// once, keeping the state of unchanged windows; a bad file is a *ConfigError
// naming the field and the old rules keep serving; Watch picks up a changed
// file; a net/http middleware sees a reload without a restart. On the memory
// store and a real Redis.

const reloadNow = int64(1_700_000_040_000)

func reloadRules(rate string) string {
	return "policies:\n  api: { algorithm: fixed_window, rate: " + rate + " }\nrules:\n  - { key: [ip], policy: api }\n"
}

func writeRules(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReloadKeepsTheWindowAndABadFileKeepsServing(t *testing.T) {
	for store, url := range map[string]string{"memory": "memory", "redis": startRedis(t).url()} {
		t.Run(store, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			writeRules(t, path, reloadRules("3/min"))
			l := newLimiter(t, Options{RulesFile: path, Store: url, Prefix: "go-reload"})
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				if d, err := l.Check(ctx, "k", WithNowMs(reloadNow)); err != nil || !d.Allowed {
					t.Fatalf("check %d: %+v %v", i, d, err)
				}
			}
			writeRules(t, path, reloadRules("5/min"))
			if err := l.Reload(ctx); err != nil {
				t.Fatal(err)
			}
			d, err := l.Check(ctx, "k", WithNowMs(reloadNow))
			if err != nil || !d.Allowed || d.Limit != 5 || d.Remaining != 1 {
				t.Fatalf("after the reload: %+v %v, want allowed, limit 5, remaining 1", d, err)
			}
			writeRules(t, path, reloadRules("often"))
			var cerr *ConfigError
			if err := l.Reload(ctx); !errors.As(err, &cerr) || cerr.Field != "policies.api.rate" {
				t.Fatalf("a bad file: %v, want a ConfigError naming policies.api.rate", err)
			}
			d, err = l.Check(ctx, "k", WithNowMs(reloadNow))
			if err != nil || !d.Allowed || d.Limit != 5 || d.Remaining != 0 {
				t.Fatalf("the old rules keep serving: %+v %v", d, err)
			}
			text, err := l.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`polylimit_config_reloads_total{result="ok"} 1`, `polylimit_config_reloads_total{result="error"} 1`} {
				if !strings.Contains(text, want) {
					t.Fatalf("metrics lack %s:\n%s", want, text)
				}
			}
		})
	}
}

func TestReloadIsSeenByTheMiddleware(t *testing.T) {
	for store, url := range map[string]string{"memory": "memory", "redis": startRedis(t).url()} {
		t.Run(store, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			writeRules(t, path, reloadRules("2/min"))
			l := newLimiter(t, Options{RulesFile: path, Store: url, Prefix: "go-reload-mw"})
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
			server := httptest.NewServer(l.Middleware()(ok))
			defer server.Close()
			get := func() *http.Response {
				resp, err := http.Get(server.URL + "/api/hello")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			statuses := func() []int {
				var out []int
				for i := 0; i < 3; i++ {
					out = append(out, get().StatusCode)
				}
				return out
			}
			if got := statuses(); got[0] != 200 || got[1] != 200 || got[2] != 429 {
				t.Fatalf("before: %v", got)
			}
			writeRules(t, path, reloadRules("4/min"))
			if err := l.Reload(context.Background()); err != nil {
				t.Fatal(err)
			}
			first := get()
			if first.StatusCode != 200 || first.Header.Get("X-RateLimit-Limit") != "4" {
				t.Fatalf("after the reload: %d, limit %q", first.StatusCode, first.Header.Get("X-RateLimit-Limit"))
			}
			if got := statuses(); got[0] != 200 || got[1] != 429 || got[2] != 429 {
				t.Fatalf("after: %v (the same window: 2 of 4 were left)", got)
			}
		})
	}
}

func TestWatchPicksUpAChangedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, reloadRules("3/min"))
	l := newLimiter(t, Options{RulesFile: path, Watch: 50 * time.Millisecond})
	ctx := context.Background()
	writeRules(t, path, reloadRules("7/min"))
	deadline := time.Now().Add(10 * time.Second)
	limit := func() uint64 {
		d, err := l.Peek(ctx, "k", WithNowMs(reloadNow))
		if err != nil {
			t.Fatal(err)
		}
		return d.Limit
	}
	for limit() != 7 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := limit(); got != 7 {
		t.Fatalf("the watch did not reload: limit %d", got)
	}
	_, err := New(Options{Policy: &Policy{Rate: "1/s"}, Watch: time.Second})
	var cerr *ConfigError
	if !errors.As(err, &cerr) || cerr.Field != "Watch" {
		t.Fatalf("Watch without RulesFile: %v, want a ConfigError naming Watch", err)
	}
}
