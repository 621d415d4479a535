package adaptertest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// CostRules are the rules PlayCost plays (path "/v1/*"; a gRPC test's
// "/<service>/*"): a request of path reserves its x-reserve header (1000
// without it, at most 4000) of a token bucket of 10 000 a day per
// x-api-key, so that a test's run refills a token or two at most.
func CostRules(store, prefix, path string) string {
	rules := map[string]any{
		"store": store, "prefix": prefix, "timeout": "10s", "headers": "legacy",
		"policies": map[string]any{"llm": map[string]any{"algorithm": "token_bucket", "rate": "10000/d"}},
		"rules": []any{map[string]any{
			"match": map[string]any{"path": path}, "key": []string{"header:x-api-key"}, "policy": "llm",
			"cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000,
		}},
	}
	text, _ := json.Marshal(rules)
	return string(text)
}

// UsedCost is the actual cost a PlayCost request asks its handler to report
// (its query's "used"), and whether it asks for one.
func UsedCost(r *http.Request) (int64, bool) {
	used, err := strconv.ParseInt(r.URL.Query().Get("used"), 10, 64)
	return used, err == nil
}

// PlayCost drives the app at url: POST /v1/chat behind the adapter under
// test (on CostRules), whose handler reports UsedCost with
// polylimit.ReportCost on its framework's context and answers 500 when
// ReportCost returns false. Each next request must see the report: the
// excess over the reservation charged whatever the limit, a smaller cost's
// difference given back.
func PlayCost(t *testing.T, url string) {
	t.Helper()
	post := func(query, reserve string) (int, int) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/chat"+query, nil)
		req.Header.Set("x-api-key", "k1")
		if reserve != "" {
			req.Header.Set("x-reserve", reserve)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		remaining, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
		return res.StatusCode, remaining
	}
	// A token refills every 8.64 s: allow two.
	near := func(got, want int) bool { return got >= want && got <= want+2 }
	if s, rem := post("?used=3400", ""); s != 200 || rem != 9000 {
		t.Fatalf("reserving 1000: %d, remaining %d (want 200, 9000; 500: ReportCost found no request)", s, rem)
	}
	if s, rem := post("?used=200", ""); s != 200 || !near(rem, 5600) {
		t.Fatalf("after 3400 were used: %d, remaining %d, want 200, 5600", s, rem)
	}
	if s, rem := post("?used=1", "1"); s != 200 || !near(rem, 6399) {
		t.Fatalf("after 200 of 1000 were used: %d, remaining %d, want 200, 6399 (800 given back)", s, rem)
	}
	if s, _ := post("", "0"); s != 400 {
		t.Fatalf("a bad reservation: %d, want 400", s)
	}
	if s, rem := post("?used=4000", "1000"); s != 200 || !near(rem, 5399) {
		t.Fatalf("reserving 1000: %d, remaining %d, want 200, 5399", s, rem)
	}
	// 3000 more were charged: about 2399 left, and 2500 do not fit.
	if s, _ := post("", "2500"); s != 429 {
		t.Fatalf("after 4000 of 1000 were used: %d, want 429", s)
	}
	if s, rem := post("", "2300"); s != 200 || !near(rem, 99) {
		t.Fatalf("2300 of the 2399 left: %d, remaining %d, want 200, 99", s, rem)
	}
}

// EstimateCost is the cost function PlayCostFunc expects the adapter to be
// given (polylimit.WithCostFunc): the request's x-estimate header.
func EstimateCost(r *http.Request) uint64 {
	n, _ := strconv.ParseUint(r.Header.Get("x-estimate"), 10, 64)
	return n
}

// PlayCostFunc drives the app at url: POST /v1/chat behind the adapter
// under test (on CostRules) given polylimit.WithCostFunc(EstimateCost). The
// cost function's number is the reservation, checked by the core against
// max_cost.
func PlayCostFunc(t *testing.T, url string) {
	t.Helper()
	post := func(estimate string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/chat", nil)
		req.Header.Set("x-api-key", "k1")
		req.Header.Set("x-estimate", estimate)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header.Get("X-RateLimit-Remaining")
	}
	if s, rem := post("2500"); s != 200 || rem != "7500" {
		t.Fatalf("an estimate of 2500: %d, remaining %s, want 200, 7500", s, rem)
	}
	if s, _ := post("4001"); s != 400 {
		t.Fatalf("an estimate above max_cost: %d, want 400", s)
	}
}
