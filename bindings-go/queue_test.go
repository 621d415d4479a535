package polylimit

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Acquires, releases and alerts come through the completion bridge
// (completions.go), as checks do: no callback from a core thread.

// Many acquires and releases in flight at once on Redis, each with its own
// key and cost: each gets its own decision, its own lease and its own
// release count back, and nothing stays behind.
func TestConcurrentRedisAcquiresAndReleasesEachGetTheirOwnResult(t *testing.T) {
	ctx := context.Background()
	const limit = 500
	l := concurrencyLimiter(t, startRedis(t).url(), limit, 30*time.Second)
	if _, lease, err := l.Acquire(ctx, "warm"); err != nil {
		t.Fatal(err)
	} else if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cost := uint64(i%limit + 1)
			key := fmt.Sprint("acq-", i)
			d, lease, err := l.Acquire(ctx, key, WithCost(cost))
			switch {
			case err != nil:
				errs <- err
				return
			case lease == nil || !d.Allowed || d.Source != SourceStore || d.Remaining != limit-cost:
				errs <- fmt.Errorf("acquire %d of cost %d: %+v (lease %v), want %d remaining from the store", i, cost, d, lease != nil, limit-cost)
				return
			}
			// Half release at once while the other acquires are in flight.
			if i%2 == 0 {
				if released, err := lease.Release(ctx); err != nil || released != 1 {
					errs <- fmt.Errorf("release %d: %d %v, want 1", i, released, err)
				}
				if released, err := lease.Release(ctx); err != nil || released != 0 {
					errs <- fmt.Errorf("second release %d: %d %v, want 0", i, released, err)
				}
				return
			}
			// The other half: the slots are still held (one more is denied), then released.
			if p, extra, err := l.Acquire(ctx, key, WithCost(limit-cost+1)); err != nil || p.Allowed || extra != nil {
				errs <- fmt.Errorf("over the held slots of %d: %+v %v, want denied", i, p, err)
			}
			if released, err := lease.Release(ctx); err != nil || released != 1 {
				errs <- fmt.Errorf("release %d: %d %v, want 1", i, released, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	settled(t, base)
}

// Redis paused with acquires and releases waiting on it, then SIGKILLed:
// the acquires get their policy's fallback decision, the releases no error
// (the leases end by themselves), nothing hangs and nothing stays behind.
func TestRedisKilledMidFlightAcquiresFallBack(t *testing.T) {
	ctx := context.Background()
	redis := startRedis(t)
	l, err := New(Options{Policy: &Policy{Algorithm: "concurrency", Limit: 100, OnStoreError: "local"}, Store: redis.url(),
		Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-lease-kill-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var leases []*Lease
	for i := range 10 {
		_, lease, err := l.Acquire(ctx, fmt.Sprint("held-", i))
		if err != nil || lease == nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		leases = append(leases, lease)
	}
	base := runtime.NumGoroutine()
	redis.pause()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, lease, err := l.Acquire(ctx, fmt.Sprint("k", i))
			if err != nil || !d.Allowed || d.Source != SourceLocal {
				t.Errorf("acquire %d: %+v %v, want a local decision", i, d, err)
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Errorf("release of a local lease %d: %v", i, err)
			}
		}()
	}
	for i, lease := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := lease.Release(ctx); err != nil {
				t.Errorf("release %d with the store down: %v", i, err)
			}
		}()
	}
	// All fifty wait on the paused server before it goes away.
	deadline := time.Now().Add(5 * time.Second)
	for waiting() < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if waiting() < 50 {
		t.Fatalf("%d operations waiting in the queue, want 50", waiting())
	}
	redis.signal(syscall.SIGKILL)
	wg.Wait()
	redis.kill()
	settled(t, base)
}

// Alerts of many keys come to OnAnomaly in the order they were decided, on
// a goroutine of their own: a function that blocks holds no check, and the
// alerts that pile up meanwhile come after it, in order. After Close the
// sink is unregistered and its goroutine gone.
func TestAlertsArriveInOrderOnTheirOwnGoroutine(t *testing.T) {
	_ = openCompletions() // its reader runs for the life of the process, not counted
	sinksBefore := alertSinks()
	base := runtime.NumGoroutine()
	release := make(chan struct{})
	var log eventLog
	first := true
	l, err := New(Options{
		Policy: &Policy{Rate: "1000/s", Adaptive: &Adaptive{Window: time.Second, Horizon: 4 * time.Second, Factor: 3, Floor: "4/s", AlertKeys: "raw"}},
		OnAnomaly: func(ev AnomalyEvent) {
			if first {
				first = false
				<-release
			}
			log.add(ev)
		},
		AnomalyLog: "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	if alertSinks() != sinksBefore+1 {
		t.Fatalf("%d sinks registered, want %d", alertSinks(), sinksBefore+1)
	}
	ctx := context.Background()
	const keys = 40
	var want []string
	for i := range keys {
		// Each key in its own seconds: the storm limit (20 a second) drops none.
		at := int64(i) * 10_000
		key := fmt.Sprint("k", i)
		for now := at; now < at+4000; now += 500 {
			if d, _ := l.Check(ctx, key, WithNowMs(now)); !d.Allowed {
				t.Fatal("denied while warming up")
			}
		}
		for range 6 {
			if _, err := l.Check(ctx, key, WithNowMs(at+4000)); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, key)
	}
	if got := log.waitFor(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("%d alerts delivered while the first delivery blocks", len(got))
	}
	close(release)
	got := log.waitFor(keys, 10*time.Second)
	if len(got) != keys {
		t.Fatalf("%d alerts, want %d", len(got), keys)
	}
	for i, ev := range got {
		if ev.Key != want[i] || ev.Action != "limit" || ev.AtMs != int64(i)*10_000+4000 {
			t.Fatalf("alert %d: %+v, want %s at %d", i, ev, want[i], int64(i)*10_000+4000)
		}
	}
	l.Close()
	if alertSinks() != sinksBefore {
		t.Fatalf("%d sinks registered after Close, want %d", alertSinks(), sinksBefore)
	}
	settled(t, base)
}
