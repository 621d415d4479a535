package polylimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Peek and reset through the Go API, on the memory store and a real Redis: a
// peek is the decision (or outcome) a check would get and charges nothing;
// ResetRequest forgets what a request would be charged, penalty blocks included.

const peekNow = int64(1_700_000_000_000)

func peekStores(t *testing.T) map[string]string {
	return map[string]string{"memory": "memory", "redis": startRedis(t).url()}
}

func TestPeekIsTheNextCheckAndChargesNothing(t *testing.T) {
	ctx := context.Background()
	for store, url := range peekStores(t) {
		t.Run(store, func(t *testing.T) {
			l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s", Burst: 3}, Store: url, Prefix: "go-peek-" + store})
			for i := 0; i < 5; i++ {
				first, err := l.Peek(ctx, "k", WithNowMs(peekNow))
				if err != nil {
					t.Fatal(err)
				}
				if again, _ := l.Peek(ctx, "k", WithNowMs(peekNow), WithCost(1)); again != first {
					t.Fatalf("peek %d changed what the next one sees: %+v then %+v", i, first, again)
				}
				if checked, _ := l.Check(ctx, "k", WithNowMs(peekNow)); checked != first {
					t.Fatalf("check %d: %+v, the peek said %+v", i, checked, first)
				}
			}
			d, _ := l.Peek(ctx, "k", WithNowMs(peekNow), WithCost(2))
			if d.Allowed || d.Remaining != 0 || d.RetryAfter.Milliseconds() != 200 {
				t.Fatalf("cost 2: %+v", d)
			}
			if _, err := l.Peek(ctx, "k", WithCost(0)); !errors.Is(err, ErrConfig) {
				t.Fatalf("cost 0: %v", err)
			}
			if store == "memory" {
				fresh := newLimiter(t, Options{Policy: &Policy{Rate: "10/s", Burst: 3}})
				before, _ := fresh.Metrics()
				_, _ = fresh.Peek(ctx, "k")
				if after, _ := fresh.Metrics(); after != before {
					t.Fatalf("a peek was counted:\n%s", after)
				}
			}
			l.Close()
			if _, err := l.Peek(ctx, "k"); !errors.Is(err, ErrClosed) {
				t.Fatalf("closed: %v", err)
			}
		})
	}
}

const peekRules = `{
  "policies": {
    "api": {"rate": "100/min", "burst": 100},
    "login": {"algorithm": "fixed_window", "rate": "3/15m",
              "penalty": {"threshold": 2, "within": "15m", "cooldowns": ["1h"]}}
  },
  "rules": [
    {"match": {"path": "/api/*"}, "key": ["ip"], "policy": "api"},
    {"match": {"method": "POST", "path": "/api/login"}, "key": ["user", "ip"], "policy": "login"}
  ]
}`

func peekLogin(ip, user string, now int64) *RequestInfo {
	return &RequestInfo{Method: "POST", Path: "/api/login", Peer: ip, User: user, NowMs: &now}
}

// seenOutcome is what a client sees of an outcome, and each policy's remaining.
func seenOutcome(o *Outcome) string {
	var remaining []uint64
	for _, d := range o.Decisions {
		remaining = append(remaining, d.Decision.Remaining)
	}
	return fmt.Sprintf("%d %v %q %v", o.Status, o.Headers, o.Body, remaining)
}

func TestPeekRequestAndResetRequest(t *testing.T) {
	ctx := context.Background()
	for store, url := range peekStores(t) {
		t.Run(store, func(t *testing.T) {
			l := newLimiter(t, Options{Rules: peekRules, Store: url, Prefix: "go-peek-req-" + store})
			ann, bob := "203.0.113.7", "198.51.100.9"
			for i := int64(0); i < 6; i++ {
				req := peekLogin(ann, "ann", peekNow+i*1000)
				peeked, err := l.PeekRequest(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if again, _ := l.PeekRequest(ctx, req); seenOutcome(again) != seenOutcome(peeked) {
					t.Fatalf("login %d: a peek changed the next: %s then %s", i, seenOutcome(peeked), seenOutcome(again))
				}
				checked, err := l.CheckRequest(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if i == 4 {
					// The denial that starts the block: a peek records nothing.
					if peeked.Decisions[1].Decision.Source != SourceStore || checked.Decisions[1].Decision.Source != SourcePenalty {
						t.Fatalf("block start: peek %+v check %+v", peeked.Decisions, checked.Decisions)
					}
				} else if seenOutcome(peeked) != seenOutcome(checked) {
					t.Fatalf("login %d: peek %s, check %s", i, seenOutcome(peeked), seenOutcome(checked))
				}
				if (checked.Status != 0) != (i >= 3) {
					t.Fatalf("login %d: status %d", i, checked.Status)
				}
			}
			blocked, _ := l.PeekRequest(ctx, peekLogin(ann, "ann", peekNow+7000))
			if blocked.Status != 429 || !containsHeader(blocked.Headers, "Retry-After", "3597") {
				t.Fatalf("blocked: %+v", blocked)
			}

			// Bob's state is made at the time of Ann's reset: made at peekNow, it would be idle
			// (full again) by then, and the memory store's sampling sweep may reclaim idle state.
			now := peekNow + 8000
			bobAPI := &RequestInfo{Path: "/api/x", Peer: bob, NowMs: &now}
			if _, err := l.CheckRequest(ctx, bobAPI); err != nil {
				t.Fatal(err)
			}
			if n, err := l.ResetRequest(ctx, peekLogin(ann, "ann", peekNow+8000)); err != nil || n != 2 {
				t.Fatalf("reset: %d %v", n, err)
			}
			again, _ := l.CheckRequest(ctx, peekLogin(ann, "ann", peekNow+8000))
			if again.Status != 0 || again.Decisions[0].Decision.Remaining != 99 || again.Decisions[1].Decision.Remaining != 2 {
				t.Fatalf("after reset: %s", seenOutcome(again))
			}
			if next, _ := l.CheckRequest(ctx, bobAPI); next.Decisions[0].Decision.Remaining != 98 {
				t.Fatalf("Bob's state must stay: %s", seenOutcome(next))
			}
			if n, err := l.ResetRequest(ctx, &RequestInfo{Path: "/health", Peer: ann}); err != nil || n != 0 {
				t.Fatalf("nothing to forget: %d %v", n, err)
			}
		})
	}
}

func containsHeader(headers [][2]string, name, value string) bool {
	for _, h := range headers {
		if h[0] == name && h[1] == value {
			return true
		}
	}
	return false
}

func TestResetForgetsAPenaltyBlock(t *testing.T) {
	ctx := context.Background()
	for store, url := range peekStores(t) {
		t.Run(store, func(t *testing.T) {
			policy := &Policy{Rate: "1/h", Burst: 1, Penalty: &Penalty{Threshold: 1, Within: time.Minute, Cooldowns: []time.Duration{time.Hour}}}
			l := newLimiter(t, Options{Policy: policy, Store: url, Prefix: "go-peek-reset-" + store})
			if d, _ := l.Check(ctx, "k", WithNowMs(peekNow)); !d.Allowed {
				t.Fatalf("first: %+v", d)
			}
			if d, _ := l.Check(ctx, "k", WithNowMs(peekNow)); d.Source != SourcePenalty {
				t.Fatalf("second: %+v", d)
			}
			if d, _ := l.Peek(ctx, "k", WithNowMs(peekNow+1000)); d.Source != SourcePenalty {
				t.Fatalf("blocked peek: %+v", d)
			}
			if err := l.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Check(ctx, "k", WithNowMs(peekNow+1000)); !d.Allowed {
				t.Fatalf("after reset: %+v", d)
			}
		})
	}
}

// A policy limiter keys requests by ip (its one rule).
func TestAPolicyLimiterPeeksAndResetsRequestsByItsKey(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s", Burst: 1}})
	now := peekNow
	req := &RequestInfo{Path: "/", Peer: "203.0.113.7", NowMs: &now}
	if o, err := l.PeekRequest(ctx, req); err != nil || o.Status != 0 {
		t.Fatalf("peek: %+v %v", o, err)
	}
	if o, _ := l.CheckRequest(ctx, req); o.Status != 0 {
		t.Fatalf("check: %+v", o)
	}
	if o, _ := l.PeekRequest(ctx, req); o.Status != 429 {
		t.Fatalf("peek after: %+v", o)
	}
	if n, err := l.ResetRequest(ctx, req); err != nil || n != 1 {
		t.Fatalf("reset: %d %v", n, err)
	}
	if o, _ := l.CheckRequest(ctx, req); o.Status != 0 {
		t.Fatalf("check after reset: %+v", o)
	}
	l.Close()
	if _, err := l.ResetRequest(ctx, req); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed reset: %v", err)
	}
	if _, err := l.PeekRequest(ctx, req); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed peek: %v", err)
	}
}

func TestWhileTheStoreIsDownAPeekAnswersByTheFallback(t *testing.T) {
	ctx := context.Background()
	// A port nothing listens on: every store call fails at once.
	store := fmt.Sprintf("redis://127.0.0.1:%d", freePort(t))
	l := newLimiter(t, Options{Policy: &Policy{Rate: "2/min", Burst: 2, OnStoreError: "local"}, Store: store})
	for i := 0; i < 3; i++ {
		if d, err := l.Peek(ctx, "k", WithNowMs(peekNow)); err != nil || !d.Allowed || d.Remaining != 1 || d.Source != SourceLocal {
			t.Fatalf("peek %d: %+v %v", i, d, err)
		}
	}
	if d, _ := l.Check(ctx, "k", WithNowMs(peekNow)); d.Remaining != 1 {
		t.Fatalf("check: %+v", d)
	}
	if d, _ := l.Peek(ctx, "k", WithNowMs(peekNow)); d.Remaining != 0 {
		t.Fatalf("peek after the check: %+v", d)
	}
	closed := newLimiter(t, Options{Policy: &Policy{Rate: "2/min", OnStoreError: "fail_closed"}, Store: store})
	if d, _ := closed.Peek(ctx, "k"); d.Source != SourceFailClosed {
		t.Fatalf("fail_closed: %+v", d)
	}
	if _, err := closed.ResetRequest(ctx, &RequestInfo{Path: "/", Peer: "203.0.113.7"}); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("reset with the store down: %v", err)
	}
}

// A key holding someone else's data is an ErrStore naming that store key;
// other keys are unaffected.
func TestAKeyHoldingForeignDataIsAStoreErrorNamingIt(t *testing.T) {
	redis := startRedis(t)
	const storeKey = "polylimit:token_bucket:default:p1000:{wrongtype}"
	if reply, err := redis.command("SET " + storeKey + " hello"); reply != "+OK" {
		t.Fatalf("SET: %q %v", reply, err)
	}
	l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s"}, Store: redis.url(), Timeout: 10 * time.Second}) // a slow CI check would fall back, not raise
	_, err := l.Check(context.Background(), "wrongtype")
	var e *Error
	if !errors.Is(err, ErrStore) || !errors.As(err, &e) || e.Key != storeKey {
		t.Fatalf("check: %#v, want an ErrStore with key %q", err, storeKey)
	}
	if d, err := l.Check(context.Background(), "other"); err != nil || !d.Allowed {
		t.Fatalf("another key: %+v %v", d, err)
	}
}
