package polylimit

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// settled waits (bounded) until no started operation is still waiting for
// its result and the goroutines are back to at most base; fails otherwise.
func settled(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if waiting() == 0 && runtime.NumGoroutine() <= base {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d operations still waiting, %d goroutines (were %d)", waiting(), runtime.NumGoroutine(), base)
}

// Many checks in flight at once on Redis, each with its own key and cost,
// and requests with their own key: each must get its own decision back
// (results come through one queue, in any order, to the right waiter).
func TestConcurrentRedisChecksEachGetTheirOwnDecision(t *testing.T) {
	redis := startRedis(t)
	const burst = 1000
	l := newLimiter(t, Options{Policy: &Policy{Algorithm: "token_bucket", Rate: "1/s", Burst: burst},
		KeyBy: []string{"key"}, Store: redis.url(), Prefix: "go-queue"})
	if _, err := l.Check(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			cost := uint64(i%burst + 1)
			d, err := l.Check(context.Background(), fmt.Sprint("check-", i), WithCost(cost), WithNowMs(1_000_000))
			switch {
			case err != nil:
				errs <- err
			case d.Source != SourceStore || !d.Allowed || d.Remaining != burst-cost:
				errs <- fmt.Errorf("check %d of cost %d: got %+v, want %d remaining from the store", i, cost, d, burst-cost)
			}
		}()
		go func() {
			defer wg.Done()
			cost := uint64(2*i%burst + 1)
			now := int64(1_000_000)
			o, err := l.CheckRequest(context.Background(), &RequestInfo{Method: "GET", Path: "/x", Peer: "203.0.113.7", Key: fmt.Sprint("request-", i), Cost: cost, NowMs: &now})
			if err != nil {
				errs <- err
				return
			}
			var remaining string
			for _, h := range o.Headers {
				if h[0] == "X-RateLimit-Remaining" {
					remaining = h[1]
				}
			}
			if o.Status != 0 || remaining != strconv.FormatUint(burst-cost, 10) {
				errs <- fmt.Errorf("request %d of cost %d: status %d, remaining %q, want %d (%v)", i, cost, o.Status, remaining, burst-cost, o.Headers)
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

// Checks waiting on a Redis that does not answer return at once when their
// context ends; their results, which still come later, find no waiter to
// disturb, and nothing stays behind.
func TestCancelledRedisChecksLeaveNothingBehind(t *testing.T) {
	redis := startRedis(t)
	l := newLimiter(t, Options{Policy: &Policy{Rate: "1000/s"}, Store: redis.url(), Prefix: "go-queue-cancel"})
	if _, err := l.Check(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	redis.pause()
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := l.Check(ctx, fmt.Sprint("k", i))
			// At once: well before the store timeout (newLimiter's 10 s).
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
				t.Errorf("want the context's error at once, got %v after %v", err, time.Since(start))
			}
		}()
	}
	wg.Wait()
	if waiting() == 0 {
		t.Fatal("the abandoned checks should still be in flight while Redis is paused")
	}
	redis.signal(syscall.SIGCONT)
	settled(t, base)
	// The waiters of the abandoned checks were not reused: new checks get their own answers.
	for i := 0; i < 20; i++ {
		d, err := l.Check(context.Background(), fmt.Sprint("fresh", i), WithCost(uint64(i+1)), WithNowMs(5_000_000))
		if err != nil || d.Remaining != 1000-uint64(i+1) {
			t.Fatalf("fresh check %d: %+v %v", i, d, err)
		}
	}
}

// Redis killed while checks and requests wait for it: each gets its
// policy's fallback decision (never an error), and nothing stays behind.
func TestRedisKilledMidFlightFallsBack(t *testing.T) {
	redis := startRedis(t)
	l := newLimiter(t, Options{Policy: &Policy{Rate: "1000/s", OnStoreError: "local"}, Store: redis.url(),
		Prefix: "go-queue-kill"})
	if _, err := l.Check(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	redis.pause()
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Check(context.Background(), fmt.Sprint("k", i))
			if err != nil || !d.Allowed || d.Source != SourceLocal {
				t.Errorf("check %d: %+v %v, want a local decision", i, d, err)
			}
		}()
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.CheckRequest(context.Background(), &RequestInfo{Method: "GET", Path: "/x", Peer: fmt.Sprint("203.0.113.", i)})
			if err != nil || o.Status != 0 || len(o.Decisions) != 1 || o.Decisions[0].Decision.Source != SourceLocal {
				t.Errorf("request %d: %+v %v, want served on a local decision", i, o, err)
			}
		}()
	}
	// All fifty wait on the paused server before it goes away (one check may
	// wait on the limiter's own connection, sansio.go, and requests on its
	// pipelined ones, sansio_pipe.go, not in the bridge).
	inFlight := func() int { return waiting() + sansIoBusy(l) + pipeInFlight(l) }
	deadline := time.Now().Add(5 * time.Second)
	for inFlight() < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if inFlight() < 50 {
		t.Fatalf("%d checks in flight, want 50", inFlight())
	}
	// SIGKILL while stopped: the server never answers what it holds.
	redis.signal(syscall.SIGKILL)
	wg.Wait()
	redis.kill()
	settled(t, base)
}

// One take of many records (every kind of the shared vectors, a panic's
// internal error among them) hands each to its own waiter, decoded as the
// vectors say; a malformed record gives its waiter an internal error
// rather than leaving it waiting.
func TestABatchReachesEachWaiter(t *testing.T) {
	if err := openCompletions(); err != nil {
		t.Fatal(err)
	}
	v := loadWireVectors(t)
	// ctxs no operation of this process uses: records of their own, not the vectors'.
	const base = uint64(1) << 62
	var batch []byte
	chans := make([]chan record, len(v.Records))
	completions.mu.Lock()
	for i, c := range v.Records {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(b, base+uint64(i))
		batch = append(batch, b...)
		chans[i] = make(chan record, 1)
		completions.waiters[base+uint64(i)] = chans[i]
	}
	completions.mu.Unlock()
	deliver(readBatch(string(batch), len(v.Records), nil))
	for i, c := range v.Records {
		rec := <-chans[i]
		kind, got := recordValue(t, rec)
		want := normalized(t, c.Value)
		if m, ok := want.(map[string]any); ok && kind == "outcome" && m["completion"] == "" {
			m["completion"] = nil
		}
		if rec.ctx != base+uint64(i) || kind != c.Kind || !reflect.DeepEqual(normalized(t, got), want) {
			t.Errorf("%s: got ctx %d %s %v, want %s %v", c.Name, rec.ctx, kind, normalized(t, got), c.Kind, want)
		}
		if c.Name == "a panic" && !errors.Is(rec.want(recordUnit), ErrInternal) {
			t.Errorf("a panic: %v, want ErrInternal", rec.err)
		}
	}
	if waiting() != 0 {
		t.Fatalf("%d waiters left", waiting())
	}
	// The first record cut short: its ctx is read, the rest is not.
	ch := make(chan record, 1)
	completions.mu.Lock()
	completions.waiters[base] = ch
	completions.mu.Unlock()
	deliver(readBatch(string(batch[:20]), 1, nil))
	if rec := <-ch; !errors.Is(rec.want(recordDecision), ErrInternal) {
		t.Fatalf("a malformed record: %+v, want ErrInternal", rec)
	}
}
