package polylimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// hangupLimiter: one concurrency slot per client, on a real Redis, with a
// 30s lease (a leaked slot would refuse every request for 30s) and a store
// timeout longer than the pause (the paused call completes, it does not fail).
func hangupLimiter(t *testing.T, redis *redisServer) *Limiter {
	return newLimiter(t, Options{Policy: &Policy{Name: "slots", Algorithm: "concurrency", Limit: 1, Lease: 30 * time.Second},
		Store: redis.url(), Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-hangup-%d", time.Now().UnixNano())})
}

// waitSettled makes cancelledRequestSettled signal on the returned channel.
func waitSettled(t *testing.T) chan struct{} {
	settled := make(chan struct{}, 4)
	cancelledRequestSettled = func() { settled <- struct{}{} }
	t.Cleanup(func() { cancelledRequestSettled = nil })
	return settled
}

// waitSeen makes cancelledRequestSeen signal on the returned channel: the
// server has noticed the hang-up (it does so on a goroutine of its own, so a
// store resumed before that would answer the check first).
func waitSeen(t *testing.T) chan struct{} {
	seen := make(chan struct{}, 4)
	cancelledRequestSeen = func() { seen <- struct{}{} }
	t.Cleanup(func() { cancelledRequestSeen = nil })
	return seen
}

func awaitSignal(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// untilPending waits until a decision waits for the (paused) store.
func untilPending(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no decision waits for the store")
		}
		time.Sleep(time.Millisecond)
	}
}

func awaitSettled(t *testing.T, settled chan struct{}) {
	t.Helper()
	awaitSignal(t, settled, "the hung-up request's decision never completed")
}

// A client that hangs up while the middleware's check waits for Redis: the
// check still completes once Redis answers and takes the slot, and the
// middleware settles it as "no response", so the next request (nothing in
// flight) is admitted rather than refused until the 30s lease ends.
func TestMiddlewareHangUpDuringCheckFreesTheSlot(t *testing.T) {
	redis := startRedis(t)
	l := hangupLimiter(t, redis)
	srv := httptest.NewServer(l.Middleware()(hello))
	t.Cleanup(srv.Close)
	if got := get(t, srv.URL).status; got != 200 {
		t.Fatalf("warm-up: %d", got)
	}
	settled := waitSettled(t)
	seen := waitSeen(t)
	redis.pause()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	// A connection of its own: cancelling closes it, and the server sees the client gone.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	done := make(chan error, 1)
	go func() {
		_, err := client.Do(req)
		done <- err
	}()
	untilPending(t)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung-up request: %v", err)
	}
	awaitSignal(t, seen, "the server never saw the client hang up")
	redis.signal(syscall.SIGCONT)
	awaitSettled(t, settled)
	if got := statuses(t, srv.URL, 3); fmt.Sprint(got) != "[200 200 200]" {
		t.Fatalf("after the hang-up, nothing in flight: %v", got)
	}
}

// CheckRequest whose ctx ends while Redis has not answered returns ctx.Err()
// and settles the outcome it did not return, so its slot is free again.
func TestCheckRequestCancelledDuringCheckFreesTheSlot(t *testing.T) {
	redis := startRedis(t)
	l := hangupLimiter(t, redis)
	bg := context.Background()
	req := &RequestInfo{Method: "GET", Path: "/", Peer: "10.0.0.1:5000"}
	if o, err := l.CheckRequest(bg, req); err != nil || o.Status != 0 || o.Completion == "" {
		t.Fatalf("warm-up: %+v %v", o, err)
	} else if err := l.Complete(bg, o.Completion, 200); err != nil {
		t.Fatal(err)
	}
	settled := waitSettled(t)
	redis.pause()
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := l.CheckRequest(ctx, req)
		done <- err
	}()
	untilPending(t)
	cancel()
	err := <-done
	redis.signal(syscall.SIGCONT)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled check: %v", err)
	}
	awaitSettled(t, settled)
	o, err := l.CheckRequest(bg, req)
	if err != nil || o.Status != 0 {
		t.Fatalf("the cancelled check kept its slot: %+v %v", o, err)
	}
	_ = l.Complete(bg, o.Completion, 200)
}
