package polylimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// concurrencyFile is the format of $POLYLIMIT_VECTORS/concurrency/*.json
// (tests/conformance/README.md): acquire steps (expect) and release steps.
type concurrencyFile struct {
	Cases []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Policy      json.RawMessage `json:"policy"`
		Steps       []struct {
			NowMs    *int64  `json:"now_ms"`
			Key      *string `json:"key"`
			Cost     *uint64 `json:"cost"`
			Release  *int    `json:"release"`
			Released *bool   `json:"released"`
			Expect   *struct {
				Allowed      *bool   `json:"allowed"`
				Remaining    *uint64 `json:"remaining"`
				ResetAfterMs *uint64 `json:"reset_after_ms"`
				RetryAfterMs *uint64 `json:"retry_after_ms"`
				Limit        *uint64 `json:"limit"`
			} `json:"expect"`
		} `json:"steps"`
	} `json:"cases"`
}

func TestConcurrencyVectors(t *testing.T) {
	files := map[string]*concurrencyFile{}
	names := vectorFiles(t, "concurrency", func(name string) any { files[name] = &concurrencyFile{}; return files[name] })
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := "memory"
			if store == "redis" {
				url = startRedis(t).url()
			}
			steps := 0
			for fi, name := range names {
				if len(files[name].Cases) == 0 {
					t.Fatalf("%s: no cases", name)
				}
				for ci, c := range files[name].Cases {
					if c.Name == "" || len(c.Policy) == 0 || len(c.Steps) == 0 {
						t.Fatalf("%s: case %d: no name, policy or steps", name, ci)
					}
					l, err := New(Options{Rules: fmt.Sprintf(`{"policies": [%s]}`, c.Policy), Store: url,
						Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-conc-%d-%d", fi, ci)})
					if err != nil {
						t.Fatalf("%s: %q: %v", name, c.Name, err)
					}
					leases := make([]*Lease, 0, len(c.Steps))
					for i, s := range c.Steps {
						steps++
						if s.NowMs == nil {
							t.Fatalf("%s: %q step %d: no now_ms", name, c.Name, i)
						}
						at := fmt.Sprintf("%s: %s: %q step %d (now_ms %d)", store, name, c.Name, i, *s.NowMs)
						if s.Release != nil {
							j := *s.Release
							if s.Released == nil || s.Expect != nil || s.Key != nil || s.Cost != nil || j >= i || leases[j] == nil {
								t.Fatalf("%s: a release step has `release` (an earlier allowed acquire) and `released` only", at)
							}
							n, err := leases[j].Release(context.Background(), WithNowMs(*s.NowMs))
							if err != nil || (n == 1) != *s.Released {
								t.Errorf("%s: released %d (%v), expected %v", at, n, err, *s.Released)
							}
							leases = append(leases, nil)
							continue
						}
						e := s.Expect
						if e == nil || s.Released != nil || e.Allowed == nil || e.Remaining == nil || e.ResetAfterMs == nil {
							t.Fatalf("%s: an acquire step has `expect` (allowed, remaining, reset_after_ms, retry_after_ms)", at)
						}
						key, cost := "k", uint64(1)
						if s.Key != nil {
							key = *s.Key
						}
						if s.Cost != nil {
							cost = *s.Cost
						}
						got, lease, err := l.Acquire(context.Background(), key, WithCost(cost), WithNowMs(*s.NowMs))
						if err != nil {
							t.Errorf("%s: %v", at, err)
							leases = append(leases, nil)
							continue
						}
						var retry *uint64
						if got.HasRetryAfter {
							v := uint64(got.RetryAfter.Milliseconds())
							retry = &v
						}
						retryOK := (retry == nil) == (e.RetryAfterMs == nil) && (retry == nil || *retry == *e.RetryAfterMs)
						if got.Allowed != *e.Allowed || got.Remaining != *e.Remaining || uint64(got.ResetAfter.Milliseconds()) != *e.ResetAfterMs ||
							!retryOK || got.Delay != 0 || got.Source != SourceStore || (e.Limit != nil && *e.Limit != got.Limit) {
							t.Errorf("%s: expected %+v (retry %v), got %+v", at, *e, e.RetryAfterMs, got)
						}
						if (lease != nil) != got.Allowed {
							t.Errorf("%s: lease %v for %+v", at, lease, got)
						}
						leases = append(leases, lease)
					}
					if m, _ := l.Metrics(); !strings.Contains(m, "polylimit_store_errors_total 0\n") {
						t.Errorf("%s: %s: %q: a store call failed", store, name, c.Name)
					}
					l.Close()
				}
			}
			t.Logf("%d steps on %s", steps, store)
		})
	}
}

func concurrencyLimiter(t *testing.T, store string, limit uint64, lease time.Duration) *Limiter {
	t.Helper()
	// A generous store timeout: these tests count admissions, and on a busy
	// machine a first call past the 100 ms default is decided by the fallback.
	l, err := New(Options{Policy: &Policy{Algorithm: "concurrency", Limit: limit, Lease: lease}, Store: store,
		Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-lease-%s-%d", t.Name(), time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLeaseAcquireRelease(t *testing.T) {
	ctx := context.Background()
	l := concurrencyLimiter(t, "memory", 2, 10*time.Second)
	d1, a, _ := l.Acquire(ctx, "k", WithNowMs(1000))
	d2, b, _ := l.Acquire(ctx, "k", WithNowMs(1000))
	d3, c, err := l.Acquire(ctx, "k", WithNowMs(1000))
	if err != nil || !d1.Allowed || d1.Remaining != 1 || !d2.Allowed || a == nil || b == nil {
		t.Fatalf("%+v %+v %v", d1, d2, err)
	}
	if d3.Allowed || c != nil || d3.RetryAfter != 10*time.Second || d3.Limit != 2 {
		t.Fatalf("third: %+v %v", d3, c)
	}
	if a.Released() {
		t.Fatal("released before Release")
	}
	if n, err := a.Release(ctx, WithNowMs(2000)); n != 1 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
	if n, err := a.Release(ctx, WithNowMs(2000)); n != 0 || err != nil || !a.Released() {
		t.Fatalf("second release: %d %v", n, err)
	}
	if d, _, _ := l.Acquire(ctx, "k", WithNowMs(2000)); !d.Allowed {
		t.Fatal("a release makes room")
	}
	if d, _, _ := l.Acquire(ctx, "k", WithNowMs(2000)); d.Allowed {
		t.Fatal("one slot came back, once")
	}
	var none *Lease
	if n, err := none.Release(ctx); n != 0 || err != nil || !none.Released() {
		t.Fatal("a nil lease releases nothing")
	}
}

func TestLeaseOptionsAndErrors(t *testing.T) {
	ctx := context.Background()
	l := concurrencyLimiter(t, "memory", 3, 5*time.Second)
	d, lease, err := l.Acquire(ctx, "k", WithNowMs(0))
	if err != nil || d.Limit != 3 || d.Remaining != 2 || d.ResetAfter != 5*time.Second || lease == nil {
		t.Fatalf("Limit and Lease reach the core: %+v %v", d, err)
	}
	var ce *ConfigError
	if _, err := l.Check(ctx, "k"); !errors.As(err, &ce) || ce.Field != "policy" || !strings.Contains(err.Error(), "is a concurrency policy") {
		t.Fatalf("Check refuses a concurrency policy: %v", err)
	}
	for _, tc := range []struct {
		policy Policy
		field  string
		text   string
	}{
		{Policy{Algorithm: "concurrency"}, "Policy.Limit", "is required for concurrency"},
		{Policy{Algorithm: "concurrency", Limit: 100001}, "Policy.Limit", "is not an integer from 1 to 100000"},
		{Policy{Algorithm: "concurrency", Limit: 2, Lease: time.Microsecond}, "Policy.Lease", ""},
		{Policy{Rate: "1/s", Limit: 2}, "Policy.Limit", "applies only to concurrency"},
	} {
		_, err := New(Options{Policy: &tc.policy})
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%+v: %v", tc.policy, err)
		}
	}
	rate, err := New(Options{Policy: &Policy{Algorithm: "gcra", Rate: "1/s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer rate.Close()
	if d, lease, err := rate.Acquire(ctx, "k", WithNowMs(0)); !d.Allowed || lease != nil || err != nil {
		t.Fatalf("no lease without a concurrency policy: %+v %v %v", d, lease, err)
	}
}

// 100 goroutines acquire at once on a real Redis with a limit of 10: exactly
// 10 leases; releasing them admits exactly 10 more.
func TestHundredAcquiresOnRedis(t *testing.T) {
	ctx := context.Background()
	l := concurrencyLimiter(t, startRedis(t).url(), 10, 30*time.Second)
	acquireAll := func() []*Lease {
		var mu sync.Mutex
		var leases []*Lease
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, lease, err := l.Acquire(ctx, "api")
				if err != nil || d.Allowed != (lease != nil) || d.Source != SourceStore {
					t.Errorf("%+v %v %v", d, lease, err)
				}
				if lease != nil {
					mu.Lock()
					leases = append(leases, lease)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		return leases
	}
	leases := acquireAll()
	if len(leases) != 10 {
		t.Fatalf("%d admitted, want 10", len(leases))
	}
	released := 0
	for _, lease := range leases {
		n, err := lease.Release(ctx)
		if err != nil {
			t.Fatal(err)
		}
		released += n
	}
	if released != 10 {
		t.Fatalf("released %d", released)
	}
	again := acquireAll()
	if len(again) != 10 {
		t.Fatalf("%d admitted after the releases, want 10", len(again))
	}
	for _, lease := range again {
		_, _ = lease.Release(ctx)
	}
}

// A request in flight when the limiter closes still releases its slot (the
// lease holds its own handle on the limiter).
func TestLeaseReleaseAfterClose(t *testing.T) {
	ctx := context.Background()
	redis := startRedis(t)
	for _, store := range []string{"memory", redis.url()} {
		prefix := fmt.Sprintf("go-lease-close-%d", time.Now().UnixNano())
		opts := Options{Policy: &Policy{Algorithm: "concurrency", Limit: 1}, Store: store, Prefix: prefix}
		l, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		_, lease, err := l.Acquire(ctx, "k")
		if err != nil || lease == nil {
			t.Fatalf("%s: %v", store, err)
		}
		l.Close()
		if _, _, err := l.Acquire(ctx, "k"); !errors.Is(err, ErrClosed) {
			t.Fatalf("%s: acquire after close: %v", store, err)
		}
		if n, err := lease.Release(ctx); n != 1 || err != nil {
			t.Fatalf("%s: release after close: %d %v", store, n, err)
		}
		if store != "memory" {
			// The slot is free in the shared store: a new limiter is admitted.
			again, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			if d, lease, err := again.Acquire(ctx, "k"); !d.Allowed || err != nil {
				t.Fatalf("released slot not free: %+v %v", d, err)
			} else {
				_, _ = lease.Release(ctx)
			}
			again.Close()
		}
	}
}

// An Acquire whose ctx ends while Redis has not answered returns ctx.Err();
// when the acquire completes, the slot it took is given back at once rather
// than held until its lease ends (60s).
func TestCancelledAcquireGivesItsSlotBack(t *testing.T) {
	ctx := context.Background()
	redis := startRedis(t)
	l, err := New(Options{Policy: &Policy{Algorithm: "concurrency", Limit: 1}, Store: redis.url(), Timeout: 10 * time.Second,
		Prefix: fmt.Sprintf("go-lease-cancel-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, lease, err := l.Acquire(ctx, "k"); err != nil || lease == nil {
		t.Fatalf("connect: %v", err)
	} else if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{})
	cancelledAcquireSettled = func() { close(settled) }
	defer func() { cancelledAcquireSettled = nil }()
	redis.pause()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, lease, err := l.Acquire(cctx, "k")
	cancel()
	redis.signal(syscall.SIGCONT)
	if !errors.Is(err, context.DeadlineExceeded) || lease != nil {
		t.Fatalf("cancelled acquire: %v %v", lease, err)
	}
	<-settled // the acquire went through once Redis woke up, and its slot was given back
	d, lease, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed {
		t.Fatalf("the cancelled acquire kept its slot: %+v", d)
	}
	_, _ = lease.Release(ctx)
}
