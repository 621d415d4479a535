package polylimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"
)

// vectorFiles reads $POLYLIMIT_VECTORS/<sub>/*.json (default
// ../tests/conformance): an unreadable or unknown-field file, or an empty
// directory, fails the run.
func vectorFiles(t *testing.T, sub string, into func(name string) any) []string {
	t.Helper()
	base := os.Getenv("POLYLIMIT_VECTORS")
	if base == "" {
		base = filepath.Join("..", "tests", "conformance")
	}
	dir := filepath.Join(base, sub)
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vectors in %s (%v)", dir, err)
	}
	sort.Strings(paths)
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		name := filepath.Base(p)
		if err := dec.Decode(into(name)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		names = append(names, name)
	}
	return names
}

type vectorFile struct {
	Cases []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Policy      json.RawMessage `json:"policy"`
		Steps       []struct {
			NowMs  *int64  `json:"now_ms"`
			Key    *string `json:"key"`
			Cost   *uint64 `json:"cost"`
			Peek   bool    `json:"peek"` // the decision a check would get, nothing charged
			Expect struct {
				Allowed      *bool   `json:"allowed"`
				Remaining    *uint64 `json:"remaining"`
				ResetAfterMs *uint64 `json:"reset_after_ms"`
				RetryAfterMs *uint64 `json:"retry_after_ms"`
				Limit        *uint64 `json:"limit"`
				DelayMs      uint64  `json:"delay_ms"`
				Source       *string `json:"source"`
			} `json:"expect"`
		} `json:"steps"`
	} `json:"cases"`
}

func requireFields(t *testing.T, where string, raw json.RawMessage, fields ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, f := range fields {
		if _, ok := m[f]; !ok {
			t.Fatalf("%s: missing %q", where, f)
		}
	}
}

func stores(t *testing.T) map[string]string {
	return map[string]string{"memory": "memory", "redis": startRedis(t).url(), "cluster": startCluster(t)}
}

func TestConformanceVectors(t *testing.T) {
	files := map[string]*vectorFile{}
	raws := map[string]*struct {
		Cases []struct {
			Steps []struct {
				Expect json.RawMessage `json:"expect"`
			} `json:"steps"`
		} `json:"cases"`
	}{}
	names := vectorFiles(t, "", func(name string) any { files[name] = &vectorFile{}; return files[name] })
	for _, name := range names {
		text, _ := os.ReadFile(filepath.Join(vectorDir(), name))
		raw := &struct {
			Cases []struct {
				Steps []struct {
					Expect json.RawMessage `json:"expect"`
				} `json:"steps"`
			} `json:"cases"`
		}{}
		if err := json.Unmarshal(text, raw); err != nil {
			t.Fatal(err)
		}
		raws[name] = raw
	}
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			steps, cases := 0, 0
			for fi, name := range names {
				file := files[name]
				if len(file.Cases) == 0 {
					t.Fatalf("%s: no cases", name)
				}
				seen := map[string]bool{}
				for ci, c := range file.Cases {
					cases++
					if seen[c.Name] || c.Name == "" || len(c.Policy) == 0 || len(c.Steps) == 0 {
						t.Fatalf("%s: case %d %q: duplicate or empty name, no policy or no steps", name, ci, c.Name)
					}
					seen[c.Name] = true
					// A generous timeout: the vectors pin decisions, and a loaded CI
					// machine must not turn a slow Redis answer into a fallback one.
					l, err := New(Options{Rules: fmt.Sprintf(`{"policies": [%s]}`, c.Policy), Store: url,
						Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-conf-%d-%d", fi, ci)})
					if err != nil {
						t.Fatalf("%s: %q: %v", name, c.Name, err)
					}
					for i, s := range c.Steps {
						steps++
						requireFields(t, fmt.Sprintf("%s: %q step %d expect", name, c.Name, i), raws[name].Cases[ci].Steps[i].Expect,
							"allowed", "remaining", "reset_after_ms", "retry_after_ms")
						if s.NowMs == nil {
							t.Fatalf("%s: %q step %d: no now_ms", name, c.Name, i)
						}
						key, cost := "k", uint64(1)
						if s.Key != nil {
							key = *s.Key
						}
						if s.Cost != nil {
							cost = *s.Cost
						}
						decide := l.Check
						if s.Peek {
							decide = l.Peek
						}
						got, err := decide(context.Background(), key, WithCost(cost), WithNowMs(*s.NowMs))
						if err != nil {
							t.Errorf("%s: %q step %d: %v", name, c.Name, i, err)
							continue
						}
						e := s.Expect
						var retry *uint64
						if got.HasRetryAfter {
							v := uint64(got.RetryAfter.Milliseconds())
							retry = &v
						}
						if got.Allowed != *e.Allowed || got.Remaining != *e.Remaining ||
							uint64(got.ResetAfter.Milliseconds()) != *e.ResetAfterMs ||
							!reflect.DeepEqual(retry, e.RetryAfterMs) || uint64(got.Delay.Milliseconds()) != e.DelayMs ||
							(e.Limit != nil && *e.Limit != got.Limit) || (e.Source != nil && Source(*e.Source) != got.Source) {
							t.Errorf("%s: %s: %q step %d (now_ms %d): expected %s, got %+v", store, name, c.Name, i, *s.NowMs,
								raws[name].Cases[ci].Steps[i].Expect, got)
						}
						// A fallback decides alike and would hide a store failure.
						if got.Source != SourceStore && got.Source != SourcePenalty {
							t.Errorf("%s: %s: %q step %d: decided by %s, not the store", store, name, c.Name, i, got.Source)
						}
					}
					l.Close()
				}
			}
			t.Logf("%d files, %d cases, %d steps on %s", len(names), cases, steps, store)
		})
	}
}

func vectorDir() string {
	if base := os.Getenv("POLYLIMIT_VECTORS"); base != "" {
		return base
	}
	return filepath.Join("..", "tests", "conformance")
}

type httpVectorFile struct {
	Cases []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Rules       json.RawMessage `json:"rules"`
		Requests    []struct {
			Request json.RawMessage `json:"request"`
			// Complete: after this request (or request Of), complete it with
			// this status (JSON null: no response). Absent: not completed here.
			Complete json.RawMessage `json:"complete"`
			Of       *int            `json:"of"`
			// cost/: the actual cost reported at that completion, and the
			// completion's clock (default: the request's now_ms).
			ActualCost *int64 `json:"actual_cost"`
			AtMs       *int64 `json:"at_ms"`
			// limits/: a step that sets, reads or removes a policy-wide
			// limit (no request), and what it returns.
			SetLimit      *limitStep      `json:"set_limit"`
			GetLimit      *limitStep      `json:"get_limit"`
			RemoveLimit   *limitStep      `json:"remove_limit"`
			ExpectLimit   json.RawMessage `json:"expect_limit"`
			ExpectRemoved *bool           `json:"expect_removed"`
			// limits/: a step that sets a per-key override, and what it returns.
			SetOverride    *limitStep      `json:"set_override"`
			ExpectOverride json.RawMessage `json:"expect_override"`
			Peek           bool            `json:"peek"` // the answer a check would get, nothing charged
			Expect         struct {
				Status  *int        `json:"status"`
				Headers [][2]string `json:"headers"`
				Body    *string     `json:"body"`
				DelayMs uint64      `json:"delay_ms"`
			} `json:"expect"`
		} `json:"requests"`
	} `json:"cases"`
}

// limitStep is a limits/ step's arguments: SetLimit(policy, rate, burst,
// ttl) at now_ms, GetLimit(policy), RemoveLimit(policy), SetOverride(key,
// policy, rate, burst, ttl) at now_ms.
type limitStep struct {
	Key    string `json:"key"` // set_override only
	Policy string `json:"policy"`
	Rate   string `json:"rate"`
	Burst  uint64 `json:"burst"`
	TTLMs  int64  `json:"ttl_ms"`
	NowMs  int64  `json:"now_ms"`
}

// playLimit plays a limits/ step: false when the step is none, else
// whether it returned what it expects (a mismatch is reported on t).
func playLimit(t *testing.T, l *Limiter, set, get, remove, override *limitStep, expectLimit, expectOverride json.RawMessage, expectRemoved *bool, where string) bool {
	t.Helper()
	ctx := context.Background()
	// A limit as the vectors write it (expires_at_ms null: never).
	asJSON := func(info *LimitInfo) string {
		if info == nil {
			return "null"
		}
		var expires any
		if info.ExpiresAtMs != 0 {
			expires = info.ExpiresAtMs
		}
		text, _ := json.Marshal(map[string]any{"policy": info.Policy, "rate": info.Rate, "burst": info.Burst,
			"limit": info.Limit, "expires_at_ms": expires})
		return string(text)
	}
	canonical := func(raw json.RawMessage) string {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: expected %s: %v", where, raw, err)
		}
		text, _ := json.Marshal(v)
		return string(text)
	}
	kinds := 0
	for _, kind := range []*limitStep{set, get, remove, override} {
		if kind != nil {
			kinds++
		}
	}
	if kinds > 1 {
		t.Errorf("%s: a limits/ step has one kind, not %d", where, kinds)
		return true
	}
	var got, want string
	var err error
	switch {
	case set != nil:
		var info *LimitInfo
		info, err = l.SetLimit(ctx, Override{Policy: set.Policy, Rate: set.Rate, Burst: set.Burst,
			TTL: time.Duration(set.TTLMs) * time.Millisecond, NowMs: set.NowMs})
		got, want = asJSON(info), canonical(expectLimit)
	case get != nil:
		var info *LimitInfo
		info, err = l.GetLimit(ctx, get.Policy)
		got, want = asJSON(info), canonical(expectLimit)
	case override != nil:
		var info *OverrideInfo
		info, err = l.SetOverride(ctx, override.Key, Override{Policy: override.Policy, Rate: override.Rate, Burst: override.Burst,
			TTL: time.Duration(override.TTLMs) * time.Millisecond, NowMs: override.NowMs})
		got, want = "null", canonical(expectOverride)
		if info != nil {
			var expires any
			if info.ExpiresAtMs != 0 {
				expires = info.ExpiresAtMs
			}
			text, _ := json.Marshal(map[string]any{"policy": info.Policy, "key": info.Key, "rate": info.Rate, "burst": info.Burst,
				"limit": info.Limit, "expires_at_ms": expires})
			got = string(text)
		}
	case remove != nil:
		var removed bool
		removed, err = l.RemoveLimit(ctx, remove.Policy)
		got, want = fmt.Sprint(removed), fmt.Sprint(expectRemoved != nil && *expectRemoved)
	default:
		return false
	}
	if err != nil {
		t.Errorf("%s: %v", where, err)
	} else if got != want {
		t.Errorf("%s: expected %s, got %s", where, want, got)
	}
	return true
}

// requestInfo reads a vector's request object (headers as an object, in
// order, or as a list of pairs); unknown fields fail.
func requestInfo(t *testing.T, raw json.RawMessage) *RequestInfo {
	t.Helper()
	var r struct {
		RequestInfo
		Headers json.RawMessage `json:"headers"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("request %s: %v", raw, err)
	}
	info := r.RequestInfo
	if len(r.Headers) > 0 && r.Headers[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(r.Headers))
		_, _ = dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v string
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("request headers %s: %v", r.Headers, err)
			}
			info.Headers = append(info.Headers, [2]string{k.(string), v})
		}
	} else if len(r.Headers) > 0 {
		if err := json.Unmarshal(r.Headers, &info.Headers); err != nil {
			t.Fatalf("request headers %s: %v", r.Headers, err)
		}
	}
	return &info
}

// completeStatus reads a step's "complete": a status, or null (0: no response).
func completeStatus(t *testing.T, raw json.RawMessage) int {
	t.Helper()
	var status *int
	if err := json.Unmarshal(raw, &status); err != nil {
		t.Fatalf("complete %s: %v", raw, err)
	}
	if status == nil {
		return 0
	}
	return *status
}

func TestHTTPConformanceVectors(t *testing.T) {
	files := map[string]*httpVectorFile{}
	names := vectorFiles(t, "http", func(name string) any { files[name] = &httpVectorFile{}; return files[name] })
	for _, name := range vectorFiles(t, "cost", func(name string) any {
		files["cost/"+name] = &httpVectorFile{}
		return files["cost/"+name]
	}) {
		names = append(names, "cost/"+name)
	}
	for _, name := range vectorFiles(t, "limits", func(name string) any {
		files["limits/"+name] = &httpVectorFile{}
		return files["limits/"+name]
	}) {
		names = append(names, "limits/"+name)
	}
	// complete settles a request with a step's status and, for cost/, its actual cost.
	complete := func(l *Limiter, token string, raw json.RawMessage, actual, at, requestNow *int64) error {
		if actual == nil {
			return l.Complete(context.Background(), token, completeStatus(t, raw))
		}
		if at == nil {
			at = requestNow
		}
		return l.CompleteWith(context.Background(), token, completeStatus(t, raw), CompleteOptions{Cost: actual, NowMs: at})
	}
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			requests := 0
			for fi, name := range names {
				if len(files[name].Cases) == 0 {
					t.Fatalf("%s: no cases", name)
				}
				for ci, c := range files[name].Cases {
					if len(c.Requests) == 0 {
						t.Fatalf("%s: %q has no requests", name, c.Name)
					}
					var rules map[string]any
					if err := json.Unmarshal(c.Rules, &rules); err != nil {
						t.Fatalf("%s: %q: %v", name, c.Name, err)
					}
					rules["store"] = url
					rules["prefix"] = fmt.Sprintf("go-http-%d-%d", fi, ci)
					if _, set := rules["timeout"]; !set {
						rules["timeout"] = "10s" // decisions, not latency, are under test
					}
					text, _ := json.Marshal(rules)
					l, err := FromRules(string(text))
					if err != nil {
						t.Fatalf("%s: %q: %v", name, c.Name, err)
					}
					tokens := make([]string, 0, len(c.Requests))
					for i, step := range c.Requests {
						requests++
						where := fmt.Sprintf("%s: %s: %q step %d", store, name, c.Name, i)
						if (step.SetLimit != nil || step.GetLimit != nil || step.RemoveLimit != nil || step.SetOverride != nil) &&
							(len(step.Request) > 0 || step.Of != nil || len(step.Complete) > 0) {
							t.Fatalf("%s: a limits/ step has no request, of or complete", where)
						}
						if playLimit(t, l, step.SetLimit, step.GetLimit, step.RemoveLimit, step.SetOverride, step.ExpectLimit, step.ExpectOverride, step.ExpectRemoved, where) {
							tokens = append(tokens, "")
							continue
						}
						if step.Of != nil {
							// The completion of an earlier request, now (what Middleware does after the response).
							token := tokens[*step.Of]
							tokens = append(tokens, "")
							if token == "" {
								t.Errorf("%s: %s: %q step %d: request %d has no completion token", store, name, c.Name, i, *step.Of)
							} else if err := complete(l, token, step.Complete, step.ActualCost, step.AtMs, nil); err != nil {
								t.Errorf("%s: %s: %q step %d: %v", store, name, c.Name, i, err)
							}
							continue
						}
						decide := l.CheckRequest
						if step.Peek {
							decide = l.PeekRequest
						}
						info := requestInfo(t, step.Request)
						got, err := decide(context.Background(), info)
						if err != nil {
							tokens = append(tokens, "")
							t.Errorf("%s: %q request %d: %v", name, c.Name, i, err)
							continue
						}
						tokens = append(tokens, got.Completion)
						if step.Complete != nil {
							if got.Completion == "" {
								t.Errorf("%s: %s: %q request %d: no completion token", store, name, c.Name, i)
							} else if err := complete(l, got.Completion, step.Complete, step.ActualCost, step.AtMs, info.NowMs); err != nil {
								t.Errorf("%s: %s: %q request %d: %v", store, name, c.Name, i, err)
							}
						}
						e := step.Expect
						status := 0
						if e.Status != nil {
							status = *e.Status
						}
						headers := e.Headers
						if headers == nil {
							headers = [][2]string{}
						}
						gotHeaders := got.Headers
						if gotHeaders == nil {
							gotHeaders = [][2]string{}
						}
						for _, d := range got.Decisions {
							if s := d.Decision.Source; s == SourceLocal || s == SourceFailOpen || s == SourceFailClosed {
								t.Errorf("%s: %s: %q request %d: decided by %s, not the store", store, name, c.Name, i, s)
							}
						}
						bodyOK := (e.Body == nil && !got.HasBody) || (e.Body != nil && got.HasBody && *e.Body == got.Body)
						if got.Status != status || !reflect.DeepEqual(gotHeaders, headers) || !bodyOK ||
							uint64(got.Delay.Milliseconds()) != e.DelayMs {
							t.Errorf("%s: %s: %q request %d: expected status %d headers %v body %v delay %d, got %+v",
								store, name, c.Name, i, status, headers, e.Body, e.DelayMs, got)
						}
					}
					l.Close()
				}
			}
			t.Logf("%d HTTP vector files, %d requests on %s", len(names), requests, store)
		})
	}
}
