package polylimit

import (
	"context"
	"errors"
	"testing"
)

// A gRPC call's completion takes its gRPC code: OK (0) is given back under
// count: failed, where Complete's 0 ("no response") charges it; NoCode is
// no status at all, charged.
func TestCompleteCallTakesTheCallsCode(t *testing.T) {
	l, err := FromRules(`
policies:
  p: { algorithm: fixed_window, rate: 3/min }
rules:
  - { match: { path: /pkg.Svc/* }, key: [ip], policy: p, count: failed }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	now := int64(1_700_000_000_000)
	call := &RequestInfo{Kind: KindGRPC, Path: "/pkg.Svc/Get", Peer: "203.0.113.7:5", NowMs: &now}
	remaining := func() string {
		t.Helper()
		out, err := l.PeekRequest(ctx, call)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range out.Headers {
			if h[0] == "x-ratelimit-remaining" {
				return h[1]
			}
		}
		t.Fatalf("no x-ratelimit-remaining in %v", out.Headers)
		return ""
	}
	for _, code := range []int{0, 0, 0, NoCode, 5} {
		out, err := l.CheckRequest(ctx, call)
		if err != nil || out.Status != 0 || out.Completion == "" {
			t.Fatalf("code %d: %+v %v", code, out, err)
		}
		if err := l.CompleteCall(ctx, out.Completion, code); err != nil {
			t.Fatal(err)
		}
		want := map[int]string{0: "2", NoCode: "1", 5: "0"}[code] // what the next check would leave
		if got := remaining(); got != want {
			t.Fatalf("after code %d: remaining %s, want %s", code, got, want)
		}
	}
	var cfg *ConfigError
	if err := l.CompleteCall(ctx, "pl1;n1;c1;t1", -2); !errors.As(err, &cfg) || cfg.Field != "code" || cfg.Value != "-2" {
		t.Errorf("code -2: %v", err)
	}
	bad := &RequestInfo{Kind: "rpc", Path: "/x"}
	if _, err := l.CheckRequest(ctx, bad); !errors.As(err, &cfg) || cfg.Field != "request.kind" || cfg.Value != "rpc" {
		t.Errorf("kind rpc: %v", err)
	}
	if _, err := l.ResetRequest(ctx, bad); !errors.As(err, &cfg) || cfg.Field != "request.kind" {
		t.Errorf("reset, kind rpc: %v", err)
	}
}
