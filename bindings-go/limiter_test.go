package polylimit

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newLimiter builds a limiter closed at the test's end. Without a Timeout it
// gets 10 s: the tests pin decisions, not latency, and on a loaded CI host a
// store call can miss the default 100 ms and fall back (a test of timeouts
// sets its own).
func newLimiter(t *testing.T, opts Options) *Limiter {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestCheckDrainsTheBurst(t *testing.T) {
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			l := newLimiter(t, Options{Policy: &Policy{Algorithm: "gcra", Rate: "10/s", Burst: 3}, Store: url, Prefix: "go-drain"})
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				d, err := l.Check(ctx, "user:1", WithNowMs(1_000_000))
				if err != nil || !d.Allowed || d.Remaining != uint64(2-i) || d.Limit != 3 || d.Source != SourceStore {
					t.Fatalf("check %d: %+v %v", i, d, err)
				}
			}
			d, err := l.Check(ctx, "user:1", WithNowMs(1_000_000))
			want := Decision{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 300 * time.Millisecond,
				RetryAfter: 100 * time.Millisecond, HasRetryAfter: true, Source: SourceStore}
			if err != nil || d != want {
				t.Fatalf("denied: %+v %v, want %+v", d, err, want)
			}
			d, _ = l.Check(ctx, "user:1", WithNowMs(1_000_000), WithCost(4))
			if d.Allowed || d.HasRetryAfter {
				t.Fatalf("a cost that never fits has no retry: %+v", d)
			}
			// Without now_ms the store's clock decides.
			if d, err := l.Check(ctx, "other"); err != nil || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("store clock: %+v %v", d, err)
			}
			if err := l.Reset(ctx, "user:1"); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Check(ctx, "user:1", WithNowMs(1_000_000)); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after reset: %+v", d)
			}
		})
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	_, err := New(Options{Policy: &Policy{Rate: "ten/s"}})
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
		t.Fatalf("want a *ConfigError, got %T %v", err, err)
	}
	if ce.Field != "Policy.Rate" || ce.Value != `"ten/s"` {
		t.Fatalf("field %q value %q (%v)", ce.Field, ce.Value, err)
	}
	// Two unnamed policies are both "default": the core names the clash.
	_, err = New(Options{Policies: []Policy{{Rate: "1/s"}, {Rate: "1/d"}}})
	if !errors.As(err, &ce) || ce.Field != "Policies" || ce.Value != `"default"` {
		t.Fatalf("duplicate names: %v", err)
	}
	// A duration is whole milliseconds: a microsecond is refused, not rounded.
	_, err = New(Options{Policy: &Policy{Rate: "1/s"}, ConnectTimeout: time.Microsecond})
	if !errors.As(err, &ce) || ce.Field != "ConnectTimeout" || ce.Value != "1000" {
		t.Fatalf("connect timeout: %v", err)
	}
	_, err = New(Options{Policy: &Policy{Rate: "1/s", Penalty: &Penalty{Threshold: 1, Within: time.Second, Cooldowns: []time.Duration{time.Second, time.Nanosecond}}}})
	if !errors.As(err, &ce) || ce.Field != "Policy.Penalty.Cooldowns[1]" {
		t.Fatalf("penalty cooldown: %v", err)
	}
	newLimiter(t, Options{Policy: &Policy{Rate: "1/s"}, ConnectTimeout: 250 * time.Millisecond})
	if _, err := FromFile("/nonexistent/polylimit.yaml"); !errors.As(err, &ce) || ce.Field != "RulesFile" {
		t.Fatalf("missing file: %v", err)
	}
	l := newLimiter(t, Options{Policy: &Policy{Rate: "1/s"}})
	if _, err := l.Check(context.Background(), "k", WithCost(0)); !errors.As(err, &ce) || ce.Field != "cost" {
		t.Fatalf("cost 0: %v", err)
	}
	if _, err := FromRules("policies:\n  api: { rate: 1/s, rate: 1000/s }\n"); !errors.As(err, &ce) || ce.Field != "policies.api.rate" {
		t.Fatalf("duplicate key in rules: %v", err)
	}
	if _, err := New(Options{Policy: &Policy{Rate: "1/s"}, Rules: "policies: { api: { rate: 1/s } }\n"}); !errors.As(err, &ce) || ce.Field != "Policy" {
		t.Fatalf("a policy beside a rules document: %v", err)
	}
	if _, err := New(Options{Policy: &Policy{Rate: "1/s", Name: "api\r\nSet-Cookie: a=b"}}); !errors.As(err, &ce) || ce.Field != "Policy.Name" {
		t.Fatalf("control characters in a name: %v", err)
	}
	if _, err := l.Check(context.Background(), "bad\xffutf8"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

func TestRulesVariablesExpandOneValueAtATime(t *testing.T) {
	t.Setenv("POLYLIMIT_TEST_BURST", "4")
	t.Setenv("POLYLIMIT_TEST_PROXY", "10.0.0.1, 0.0.0.0/0")
	l, err := FromRules("policies: { api: { rate: 1/s, burst: ${POLYLIMIT_TEST_BURST:-3} } }\nrules: [{ policy: api }]\n")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.Check(context.Background(), "k", WithNowMs(1000)); err != nil || d.Limit != 4 {
		t.Fatalf("%+v %v", d, err)
	}
	var ce *ConfigError
	_, err = FromRules("policies: { api: { rate: 1/s } }\ntrusted_proxies: [${POLYLIMIT_TEST_PROXY}]\n")
	if !errors.As(err, &ce) || ce.Field != "trusted_proxies[0]" {
		t.Fatalf("a variable added structure: %v", err)
	}
}

func TestFromFileReadsTheExampleRules(t *testing.T) {
	l, err := FromFile("../examples/polylimit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	o, err := l.CheckRequest(context.Background(), &RequestInfo{Method: "GET", Path: "/api/x", Peer: "203.0.113.9"})
	if err != nil || o.Status != 0 || len(o.Headers) != 5 || o.Headers[1] != [2]string{"X-RateLimit-Remaining", "9"} {
		t.Fatalf("%+v %v", o, err)
	}
	if len(o.Decisions) != 1 || o.Decisions[0].Policy != "api" || o.Decisions[0].Rule != "api" ||
		o.Decisions[0].Decision.Remaining != 9 || o.Decisions[0].Decision.Source != SourceStore {
		t.Fatalf("decisions %+v", o.Decisions)
	}
}

func TestCloseIsIdempotentAndLaterChecksFail(t *testing.T) {
	l, err := New(Options{Policy: &Policy{Rate: "10/s"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var closed atomic.Int32
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := l.Check(context.Background(), "k"); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
					closed.Add(1)
					return
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	if l.Close() != nil || l.Close() != nil {
		t.Fatal("close")
	}
	wg.Wait()
	if _, err := l.Check(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := l.Metrics(); !errors.Is(err, ErrClosed) {
		t.Fatalf("metrics after close: %v", err)
	}
}

func TestFinalizerFreesAForgottenLimiter(t *testing.T) {
	freed := make(chan struct{}, 1)
	freedHook = func() { freed <- struct{}{} }
	defer func() { freedHook = nil }()
	func() {
		if _, err := New(Options{Policy: &Policy{Rate: "10/s"}}); err != nil {
			t.Fatal(err)
		}
	}()
	for i := 0; i < 50; i++ {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the finalizer did not run")
}

func TestCheckHonoursContextWhileRedisHangs(t *testing.T) {
	redis := startRedis(t)
	l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s"}, Store: redis.url(), Prefix: "go-ctx"})
	if _, err := l.Check(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	redis.pause()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Check(ctx, "k")
	// At once: well before the store timeout (newLimiter's 10 s).
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("want the context's error at once, got %v after %v", err, time.Since(start))
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := l.Check(cancelled, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestRedisDownFallsBackPerPolicy(t *testing.T) {
	redis := startRedis(t)
	url := redis.url()
	redis.kill()
	for _, c := range []struct {
		mode    string
		allowed bool
		source  Source
	}{{"local", true, SourceLocal}, {"fail_open", true, SourceFailOpen}, {"fail_closed", false, SourceFailClosed}} {
		l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s", OnStoreError: c.mode}, Store: url, Timeout: 50 * time.Millisecond})
		d, err := l.Check(context.Background(), "k")
		if err != nil || d.Allowed != c.allowed || d.Source != c.source {
			t.Fatalf("%s: %+v %v", c.mode, d, err)
		}
	}
}

func TestMetricsText(t *testing.T) {
	l := newLimiter(t, Options{Policy: &Policy{Name: "api", Rate: "1/s", Burst: 1}})
	l.Check(context.Background(), "k")
	l.Check(context.Background(), "k")
	text, err := l.Metrics()
	if err != nil || !contains(text, "polylimit_requests_total") {
		t.Fatalf("%v\n%s", err, text)
	}
}

func contains(s, sub string) bool { return len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0) }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestMillisSaturatesWhereDurationEnds(t *testing.T) {
	if got := millis(1500); got != 1500*time.Millisecond {
		t.Fatalf("1500 ms: %v", got)
	}
	if got := millis(1 << 62); got != time.Duration(math.MaxInt64) {
		t.Fatalf("2^62 ms wrapped to %v", got)
	}
}
