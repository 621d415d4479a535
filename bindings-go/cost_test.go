package polylimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Cost from the request and reconciled after the response: CompleteWith
// through the API, and net/http with a handler that reports its actual cost
// with ReportCost, on memory and a real Redis. The exact numbers per
// algorithm are the vectors in tests/conformance/cost.

func llmRules(store string, prefix string) string {
	rules := map[string]any{
		"store":    store,
		"prefix":   prefix,
		"timeout":  "10s",
		"headers":  "legacy",
		"policies": map[string]any{"llm": map[string]any{"algorithm": "token_bucket", "rate": "10000/min"}},
		"rules": []any{map[string]any{
			"match": map[string]any{"path": "/v1/*"}, "key": []string{"header:x-api-key"}, "policy": "llm",
			"cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000,
		}},
	}
	text, _ := json.Marshal(rules)
	return string(text)
}

func TestCompleteWithTheActualCost(t *testing.T) {
	for store, url := range map[string]string{"memory": "memory", "redis": startRedis(t).url()} {
		t.Run(store, func(t *testing.T) {
			l, err := FromRules(llmRules(url, "go-cost-api-"+store))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			now := int64(1_700_000_000_000)
			req := &RequestInfo{Method: "POST", Path: "/v1/chat", Peer: "203.0.113.7", NowMs: &now,
				Headers: [][2]string{{"x-api-key", "k1"}}}
			o, err := l.CheckRequest(ctx, req)
			if err != nil || o.Completion == "" {
				t.Fatalf("%+v %v", o, err)
			}
			used := int64(3400)
			if err := l.CompleteWith(ctx, o.Completion, 200, CompleteOptions{Cost: &used, NowMs: &now}); err != nil {
				t.Fatal(err)
			}
			o, _ = l.CheckRequest(ctx, req)
			if got := o.Decisions[0].Decision.Remaining; got != 5600 {
				t.Fatalf("after charging 3400: %d", got)
			}
			little := int64(200)
			if err := l.CompleteWith(ctx, o.Completion, 200, CompleteOptions{Cost: &little}); err != nil {
				t.Fatal(err)
			}
			o, _ = l.CheckRequest(ctx, req)
			if got := o.Decisions[0].Decision.Remaining; got != 5400 {
				t.Fatalf("after giving 800 back: %d", got)
			}
			negative := int64(-1)
			var cerr *ConfigError
			if err := l.CompleteWith(ctx, o.Completion, 200, CompleteOptions{Cost: &negative}); !errors.As(err, &cerr) || cerr.Field != "cost" {
				t.Fatalf("%v", err)
			}
			bad := *req
			bad.Headers = [][2]string{{"x-api-key", "k1"}, {"x-reserve", "lots"}}
			if o, _ := l.CheckRequest(ctx, &bad); o.Status != 400 {
				t.Fatalf("%+v", o)
			}
		})
	}
}

func TestMiddlewareSettlesTheReportedCost(t *testing.T) {
	for store, url := range map[string]string{"memory": "memory", "redis": startRedis(t).url()} {
		t.Run(store, func(t *testing.T) {
			l, err := FromRules(llmRules(url, "go-cost-mw-"+store))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				used, _ := strconv.ParseInt(r.URL.Query().Get("used"), 10, 64)
				if !ReportCost(r.Context(), used) { // the tokens the model used
					http.Error(w, "no cost holder", http.StatusInternalServerError)
					return
				}
				fmt.Fprintf(w, "used %d", used)
			})
			srv := httptest.NewServer(l.Middleware()(handler))
			defer srv.Close()
			post := func(query, reserve string) *http.Response {
				req, _ := http.NewRequest("POST", srv.URL+"/v1/chat"+query, nil)
				req.Header.Set("x-api-key", "k1")
				if reserve != "" {
					req.Header.Set("x-reserve", reserve)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			if r := post("?used=3400", ""); r.StatusCode != 200 || r.Header.Get("X-RateLimit-Remaining") != "9000" {
				t.Fatalf("%d %v", r.StatusCode, r.Header)
			}
			r := post("?used=1000", "")
			if rem, _ := strconv.Atoi(r.Header.Get("X-RateLimit-Remaining")); rem < 5600 || rem > 5610 {
				t.Fatalf("3400 charged for the first: %d", rem)
			}
			if r := post("", "0"); r.StatusCode != 400 {
				t.Fatalf("a bad cost header: %d", r.StatusCode)
			}
			if r := post("?used=4000", "4000"); r.StatusCode != 200 {
				t.Fatalf("%d", r.StatusCode)
			}
			if r := post("", "4000"); r.StatusCode != 429 {
				t.Fatalf("the debt is real: %d", r.StatusCode)
			}
			if ReportCost(context.Background(), 1) {
				t.Fatal("a context outside the middleware has no cost holder")
			}
		})
	}
}

// WithCostFunc gives the request's cost; the core checks it against the
// rules' max_cost (a 400 naming "cost" above it).
func TestCostFuncIsBoundedByMaxCost(t *testing.T) {
	l, err := FromRules(llmRules("memory", "go-cost-func"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	costOf := func(r *http.Request) uint64 {
		n, _ := strconv.ParseUint(r.Header.Get("x-estimate"), 10, 64)
		return n
	}
	srv := httptest.NewServer(l.Middleware(WithCostFunc(costOf))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	post := func(estimate string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat", nil)
		req.Header.Set("x-api-key", "k1")
		req.Header.Set("x-estimate", estimate)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("2500"); r.StatusCode != 200 || r.Header.Get("X-RateLimit-Remaining") != "7500" {
		t.Fatalf("%d %v", r.StatusCode, r.Header)
	}
	if r := post("4001"); r.StatusCode != 400 {
		t.Fatalf("above max_cost: %d", r.StatusCode)
	}
}

// A cost the core refuses (negative) still completes the request without
// it: the concurrency slot comes back for the next request.
func TestMiddlewareCompletesWithoutARefusedCost(t *testing.T) {
	rules := `{"policies": {"llm": {"rate": "100/min"}, "slots": {"algorithm": "concurrency", "limit": 1, "lease": "1h"}},
	  "rules": [{"match": {"path": "/v1/*"}, "key": ["header:x-api-key"], "policy": ["llm", "slots"], "cost": 1}]}`
	l, err := FromRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ReportCost(r.Context(), -5)
		fmt.Fprint(w, "ok")
	})
	srv := httptest.NewServer(l.Middleware()(handler))
	defer srv.Close()
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat", nil)
		req.Header.Set("x-api-key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d (the slot of a request with a refused cost was kept)", i, resp.StatusCode)
		}
	}
}
