package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/polylimit/polylimit/tests/gateway/harness"
)

// What Envoy's rate-limit protocol cannot express. A request is one
// ShouldRateLimit call with one descriptor; there is no call that completes
// a request after its response, no peek, no delay in the answer, and the
// proxy sends the path as the client wrote it.
const (
	whyCompletion = "after a completion: RLS has no call that completes a request after its response (the server leaves a count rule's token unused: every request counts)"
	whyPeek       = "a peek: RLS has no call that decides without charging"
	whyRouter     = "a framework's own path matching (case_insensitive, ignore_trailing_slash): a proxy sends the path as the client wrote it"
	whyLease      = "after a concurrency slot is taken: RLS cannot say when a request ends, so the server gives a slot back as soon as it is decided (docs/server.md)"
	whyDelay      = "delay_ms is not compared: an RLS answer is OK or OVER_LIMIT, it cannot delay a request (shape)"
)

// exclusion is a case's steps left out (or, for whyDelay, played without
// comparing delay_ms), by index.
type exclusion struct {
	file, name, steps, why string
}

// excluded is every step the vectors hold that RLS cannot express, written out
// so a new vector needing an exclusion fails TestExclusionsAreExact instead of
// being skipped silently.
var excluded = []exclusion{
	{"concurrency.json", "in flight: two slots per client; a completed request gives its slot back, whatever its status", "1-9", whyLease},
	{"concurrency.json", "headers legacy: X-RateLimit-Limit and -Remaining, no X-RateLimit-Reset", "1-2", whyLease},
	{"concurrency.json", "headers both: legacy without X-RateLimit-Reset, IETF with the quota unit and no w or t", "1-2", whyLease},
	{"concurrency.json", "headers draft-6: RateLimit-Policy is the limit alone (no w), no RateLimit-Reset", "1-2", whyLease},
	{"concurrency.json", "headers draft-7: RateLimit-Policy is the limit alone (no w), RateLimit without reset", "1-2", whyLease},
	{"concurrency.json", "headers draft-8: the quota unit instead of w, no t", "1-2", whyLease},
	{"concurrency.json", "headers legacy with draft-7: neither has a window or a reset", "1-2", whyLease},
	{"count.json", "login brute force: 5 failed logins per 15 min per user and ip, successful ones free (fixed_window, failed)", "1-12", whyCompletion},
	{"count.json", "successful: errors and requests without a response are free (fixed_window)", "1-5", whyCompletion},
	{"count.json", "a list of classes: 4xx counts, 5xx and 2xx do not (sliding_window_counter)", "1-4", whyCompletion},
	{"count.json", "a list of codes (sliding_window_log); a refund after a later admission is still exact", "1-5", whyCompletion},
	{"count.json", "fixed_window: a refund after a later admission in the same window is exact", "2-4", whyCompletion},
	{"count.json", "token_bucket: refunded right after the admission, kept after a later one (never over-admits)", "1-4", whyCompletion},
	{"count.json", "gcra: refunded at the admission's ms, kept after a later admission", "1-5", whyCompletion},
	{"count.json", "leaky_bucket police: refunded at the admission's ms; no response counts as failed", "1-6", whyCompletion},
	{"count.json", "only the rule with count gives back: a global all-count rule keeps its charge", "1-3", whyCompletion},
	{"count.json", "shadow rules give back like the others", "1-2", whyCompletion},
	{"count.json", "leaky_bucket shape: a success gives its place in the queue back", "1-3", whyCompletion},
	{"count.json", "a policy with a penalty: successes are given back, refusals still feed the penalty", "1-4", whyCompletion},
	{"count.json", "a token completes once: completing a request in flight again gives nothing back, two failures fill 2/min (fixed_window, failed)", "2-6", whyCompletion},
	{"count.json", "the same policy and key in a failed rule and a [2xx] rule: a status counts if either rule counts it", "1-4", whyCompletion},
	{"count.json", "the same policy and key in a failed rule and an all rule: every status counts", "1-2", whyCompletion},
	{"features.json", "leaky_bucket shape: admitted requests carry delay_ms", "1-2, 4", whyDelay},
	{"peek.json", "a peek gets the answer the request would get, and charges nothing", "0-1, 3, 5-6, 8", whyPeek},
	{"peek.json", "a peek decides every matching rule and charges none of them", "0, 2, 4, 6-7", whyPeek},
	{"peek.json", "a peek during a penalty block gets the rest of the block and neither records nor extends it", "2-3, 5, 7", whyPeek},
	{"peek.json", "a peek of a denylisted or allowlisted client answers as a check would", "0-1, 3", whyPeek},
	{"trust.json", "path matching: a case-insensitive framework that ignores a trailing slash (Express)", "0-8", whyRouter},
}

// needsExclusion is what the vectors themselves require to be left out.
func needsExclusion(files map[string]vectorFile) []exclusion {
	var out []exclusion
	for _, file := range sortedNames(files) {
		for _, c := range files[file].Cases {
			steps := map[string][]int{}
			completed, leased := false, false
			for i, s := range c.Requests {
				switch {
				case leased:
					steps[whyLease] = append(steps[whyLease], i)
				case completed || s.Request == nil: // a completion step, or after one
					steps[whyCompletion] = append(steps[whyCompletion], i)
				case s.Peek:
					steps[whyPeek] = append(steps[whyPeek], i)
				case s.Request != nil && (s.Request.CaseInsensitive || s.Request.IgnoreTrailingSlash):
					steps[whyRouter] = append(steps[whyRouter], i)
				case s.Expect != nil && s.Expect.DelayMs != 0:
					steps[whyDelay] = append(steps[whyDelay], i)
				}
				if s.Complete != nil {
					completed = true
				}
				leased = leased || (s.Request != nil && !s.Peek && hasConcurrency(c.Rules))
			}
			for _, why := range []string{whyLease, whyCompletion, whyPeek, whyRouter, whyDelay} {
				if len(steps[why]) > 0 {
					out = append(out, exclusion{file, c.Name, stepRange(steps[why]), why})
				}
			}
		}
	}
	return out
}

// hasConcurrency is whether the rules have a concurrency policy.
func hasConcurrency(rules map[string]any) bool {
	policies, _ := rules["policies"].(map[string]any)
	for _, p := range policies {
		if p, ok := p.(map[string]any); ok && p["algorithm"] == "concurrency" {
			return true
		}
	}
	return false
}

func TestExclusionsAreExact(t *testing.T) {
	need := needsExclusion(loadVectors(t))
	if !reflect.DeepEqual(need, excluded) {
		var b strings.Builder
		for _, e := range need {
			fmt.Fprintf(&b, "\t{%q, %q, %q, %s},\n", e.file, e.name, e.steps, whyName(e.why))
		}
		t.Fatalf("the exclusion list is not what the vectors need; it should be:\n%s", b.String())
	}
}

func whyName(why string) string {
	return map[string]string{whyLease: "whyLease", whyCompletion: "whyCompletion", whyPeek: "whyPeek", whyRouter: "whyRouter", whyDelay: "whyDelay"}[why]
}

// skipped is the steps of a case left out (the whyDelay ones are played:
// an answer has no delay to compare).
func skipped(file, name string) map[int]bool {
	skip := map[int]bool{}
	for _, e := range excluded {
		if e.file != file || e.name != name || e.why == whyDelay {
			continue
		}
		for _, part := range strings.Split(e.steps, ", ") {
			var from, to int
			if n, _ := fmt.Sscanf(part, "%d-%d", &from, &to); n == 2 {
				for i := from; i <= to; i++ {
					skip[i] = true
				}
			} else {
				fmt.Sscanf(part, "%d", &from)
				skip[from] = true
			}
		}
	}
	return skip
}

// descriptor is the request as one RLS descriptor (docs/server.md's mapping):
// the request model's fields under their own names, the peer as
// remote_address, each header under its name.
func descriptor(r *vectorRequest) ([]harness.Entry, error) {
	var entries []harness.Entry
	add := func(key string, v *string) {
		if v != nil {
			entries = append(entries, harness.Entry{Key: key, Value: *v})
		}
	}
	add("remote_address", r.Peer)
	add("method", r.Method)
	add("path", r.Path)
	add("route", r.Route)
	add("user", r.User)
	add("api_key", r.APIKey)
	add("key", r.Key)
	headers, err := r.headerPairs()
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		switch strings.ToLower(h[0]) {
		case "remote_address", "method", ":method", "path", ":path", "route", "user", "api_key", "key":
			return nil, fmt.Errorf("header %q has the name of a request field's entry", h[0])
		}
		entries = append(entries, harness.Entry{Key: h[0], Value: h[1]})
	}
	return entries, nil
}

// store is where a run keeps its counters.
type store struct {
	name, url string
}

func TestGRPCConformance(t *testing.T) {
	files := loadVectors(t)
	redis, err := harness.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Kill()
	for _, s := range []store{{"memory", "memory"}, {"redis", redis.URL()}} {
		t.Run(s.name, func(t *testing.T) {
			played, steps := 0, 0
			for fi, file := range sortedNames(files) {
				for ci, c := range files[file].Cases {
					played += playCase(t, s, fmt.Sprintf("gw-%d-%d", fi, ci), file, c)
					steps += len(c.Requests)
				}
			}
			t.Logf("%d HTTP vector files: %d of their %d steps through gRPC on %s (the others in the exclusion list)", len(files), played, steps, s.name)
		})
	}
}

// playCase runs one case on its own server and returns the requests played.
func playCase(t *testing.T, s store, prefix, file string, c vectorCase) int {
	t.Helper()
	where := fmt.Sprintf("%s: %s: %q", s.name, file, c.Name)
	skip := skipped(file, c.Name)
	rules := map[string]any{}
	for k, v := range c.Rules {
		rules[k] = v
	}
	rules["store"], rules["prefix"] = s.url, prefix
	// The vectors pin decisions, not latency: a loaded machine must not fall back.
	rules["timeout"] = "10s"
	path := filepath.Join(t.TempDir(), "rules.json")
	text, _ := json.Marshal(rules)
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	server, err := harness.StartServer(harness.ServerOptions{Rules: path, TrustClientClock: true})
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	defer server.Stop()
	client, err := harness.Dial(server.Grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	played := 0
	for i, step := range c.Requests {
		if skip[i] {
			continue
		}
		if step.Request == nil || step.Expect == nil {
			t.Fatalf("%s step %d: not a request with expect, and not excluded", where, i)
		}
		entries, err := descriptor(step.Request)
		if err != nil {
			t.Fatalf("%s step %d: %v", where, i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if step.Request.NowMs != nil {
			ctx = harness.WithNow(ctx, *step.Request.NowMs)
		}
		// The cost as Envoy sends it: the descriptor's own hits_addend on even
		// steps, the request's on odd ones (both are in the mapping).
		var hits uint32
		var dhits *uint64
		if cost := step.Request.Cost; cost != nil {
			if i%2 == 0 {
				dhits = cost
			} else {
				hits = uint32(*cost)
			}
		}
		reply, err := client.ShouldRateLimit(ctx, "polylimit", hits, harness.Descriptor(dhits, entries...))
		cancel()
		played++
		if err != nil {
			t.Errorf("%s step %d: %v", where, i, err)
			continue
		}
		if got, want := answer(reply), expected(step.Expect); !reflect.DeepEqual(got, want) {
			t.Errorf("%s step %d:\n  expected %s\n  got      %s", where, i, want, got)
		}
	}
	// A store failure would be hidden by the local fallback, which decides alike.
	if text, err := server.Metrics(); err != nil || !strings.Contains(text, "polylimit_store_errors_total 0\n") {
		t.Errorf("%s: a store call failed (or no /metrics: %v)", where, err)
	}
	return played
}

// rlsAnswer is what a step's answer is compared on.
type rlsAnswer struct {
	Code    string
	Headers [][2]string
	Body    string
}

func (a rlsAnswer) String() string {
	b, _ := json.Marshal(a)
	return string(b)
}

// expected is the vector's expect as an RLS answer: let through is OK, a
// refusal (429, 403, 503) is OVER_LIMIT with the refusal's headers and body.
func expected(e *vectorExpect) rlsAnswer {
	a := rlsAnswer{Code: rlsv3.RateLimitResponse_OK.String()}
	if e.Status != nil {
		a.Code = rlsv3.RateLimitResponse_OVER_LIMIT.String()
	}
	a.Headers = append([][2]string{}, e.Headers...)
	if e.Body != nil {
		// A refusal's body is JSON: the header a middleware sets with it,
		// which Envoy needs to send the body as the app would.
		a.Body = *e.Body
		a.Headers = append(a.Headers, [2]string{"content-type", "application/json"})
	}
	return a
}

func answer(r *rlsv3.RateLimitResponse) rlsAnswer {
	a := rlsAnswer{Code: r.GetOverallCode().String(), Headers: [][2]string{}, Body: string(r.GetRawBody())}
	for _, h := range r.GetResponseHeadersToAdd() {
		a.Headers = append(a.Headers, [2]string{h.GetKey(), h.GetValue()})
	}
	// One descriptor: its status is the overall one.
	if st := r.GetStatuses(); len(st) != 1 || st[0].GetCode() != r.GetOverallCode() {
		a.Code += fmt.Sprintf(" (statuses %v)", st)
	}
	return a
}
