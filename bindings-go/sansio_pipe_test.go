package polylimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/polylimit/polylimit/bindings-go/internal/sansio"
)

// The requests' sans-I/O path (sansio_pipe.go): CheckRequest and the
// middleware carry their one store call on the limiter's own pipelined
// connection(s), on a real redis-server.

// pipeLimiter is a limiter keyed by IP under one policy on redis.
func pipeLimiter(t *testing.T, redis *redisServer, policy string, timeout time.Duration) *Limiter {
	t.Helper()
	rules := fmt.Sprintf("policies:\n  api: %s\nrules:\n  - { key: [ip], policy: api }\n", policy)
	// A breaker that does not open: the tests fail many calls at once.
	l, err := New(Options{Rules: rules, Store: redis.url(), Timeout: timeout, Prefix: "go-pipe", FailureThreshold: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if l.pipe == nil {
		t.Fatal("no sans-I/O path for a plain-TCP standalone Redis")
	}
	return l
}

func pipeRequest(peer string) *RequestInfo {
	return &RequestInfo{Method: "GET", Path: "/x", Peer: peer}
}

// pipeReady sends warm-up requests until one is decided on the limiter's
// own connection (the first ones go the usual way while it dials).
func pipeReady(t *testing.T, l *Limiter) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		before := l.pipe.decided.Load()
		if _, err := l.CheckRequest(context.Background(), pipeRequest("192.0.2.250")); err != nil {
			t.Fatal(err)
		}
		if l.pipe.decided.Load() > before {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no request went through the sans-I/O connection")
}

// pipeSent makes every batch written on l's connections signal the returned channel.
func pipeSent(l *Limiter) chan struct{} {
	sent := make(chan struct{}, 1)
	s := l.pipe.slots[0]
	s.mu.Lock()
	l.pipe.written = func() {
		select {
		case sent <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	return sent
}

// comparable is an outcome without its times (they differ between two
// runs by the time between them), with the reset headers rounded.
var retryAfterInBody = regexp.MustCompile(`"retry_after":\d+`)

func comparableOutcome(o *Outcome) string {
	var b strings.Builder
	// The body's retry_after: seconds that may tick between the runs, as the headers' below.
	body := retryAfterInBody.ReplaceAllString(o.Body, `"retry_after":~`)
	fmt.Fprintf(&b, "status %d body %q/%v;", o.Status, body, o.HasBody)
	for _, h := range o.Headers {
		name := strings.ToLower(h[0])
		v := h[1]
		if strings.Contains(name, "reset") || strings.Contains(name, "retry") || name == "ratelimit" {
			// Seconds that may tick between the runs.
			v = "~"
		}
		fmt.Fprintf(&b, " %s=%s", name, v)
	}
	for _, d := range o.Decisions {
		fmt.Fprintf(&b, " [%s/%s allowed %v remaining %d limit %d source %s]", d.Rule, d.Policy,
			d.Decision.Allowed, d.Decision.Remaining, d.Decision.Limit, d.Decision.Source)
	}
	return b.String()
}

func TestSansPipeDecidesRequestsAsTheUsualPath(t *testing.T) {
	redis := startRedis(t)
	policies := []struct {
		policy  string
		covered bool
	}{
		{`{ algorithm: fixed_window, rate: 5/m }`, true},
		{`{ algorithm: token_bucket, rate: 5/m }`, true},
		{`{ algorithm: gcra, rate: 5/m }`, true},
		{`{ algorithm: token_bucket, rate: 5/m, burst: 3 }`, true},
		{`{ algorithm: sliding_window_counter, rate: 5/m }`, false},
	}
	for _, p := range policies {
		l := pipeLimiter(t, redis, p.policy, time.Second)
		if p.covered {
			pipeReady(t, l)
		} else {
			_, _ = l.CheckRequest(context.Background(), pipeRequest("192.0.2.250"))
		}
		run := func(peer string, off bool) []string {
			sansio.RequestsOff.Store(off)
			defer sansio.RequestsOff.Store(false)
			var out []string
			for i, cost := range []uint64{1, 2, 1, 1, 3, 1, 1} {
				req := pipeRequest(peer)
				req.Cost = cost
				o, err := l.CheckRequest(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: request %d: %v", p.policy, i, err)
				}
				out = append(out, comparableOutcome(o))
				// The middleware's shape: no decisions in the outcome.
				o, err = l.decideRequest(context.Background(), pipeRequest(peer+"0"), 0)
				if err != nil {
					t.Fatalf("%s: request %d: %v", p.policy, i, err)
				}
				out = append(out, comparableOutcome(o))
			}
			return out
		}
		before := l.pipe.decided.Load()
		ours := run("198.51.100.1", false)
		sent := l.pipe.decided.Load() - before
		usual := run("198.51.100.2", true)
		if l.pipe.decided.Load()-before != sent {
			t.Fatalf("%s: a request went through the sans-I/O connection while it was off", p.policy)
		}
		if (sent == uint64(len(ours))) != p.covered {
			t.Fatalf("%s: %d of %d requests went through the sans-I/O connection", p.policy, sent, len(ours))
		}
		for i := range ours {
			if ours[i] != usual[i] {
				t.Errorf("%s: request %d:\n sans-I/O %s\n usual    %s", p.policy, i, ours[i], usual[i])
			}
		}
	}
}

func TestSansPipeMiddlewareAnswersAsTheUsualPath(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: fixed_window, rate: 3/m }`, time.Second)
	pipeReady(t, l)
	h := l.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	run := func(ip string, off bool) []string {
		sansio.RequestsOff.Store(off)
		defer sansio.RequestsOff.Store(false)
		var out []string
		for i := 0; i < 5; i++ {
			r := httptest.NewRequest("GET", "/x", nil)
			r.RemoteAddr = ip + ":1234"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			line := fmt.Sprintf("%d %q", w.Code, w.Body.String())
			for _, name := range []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Policy", "Content-Type"} {
				line += " " + name + "=" + w.Header().Get(name)
			}
			out = append(out, line)
		}
		return out
	}
	before := l.pipe.decided.Load()
	ours := run("198.51.100.3", false)
	if got := l.pipe.decided.Load() - before; got != 5 {
		t.Fatalf("%d of 5 middleware requests went through the sans-I/O connection", got)
	}
	usual := run("198.51.100.4", true)
	if strings.Join(ours, "\n") != strings.Join(usual, "\n") {
		t.Fatalf("sans-I/O:\n%s\nusual:\n%s", strings.Join(ours, "\n"), strings.Join(usual, "\n"))
	}
	if !strings.HasPrefix(ours[4], "429") || !strings.HasPrefix(ours[0], "200") {
		t.Fatalf("want 3 allowed then 429: %v", ours)
	}
}

// remainingOfRequest is the remaining count of peer's requests, through the usual path.
func remainingOfRequest(t *testing.T, l *Limiter, peer string) uint64 {
	t.Helper()
	sansio.RequestsOff.Store(true)
	defer sansio.RequestsOff.Store(false)
	o, err := l.PeekRequest(context.Background(), pipeRequest(peer))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Decisions) != 1 || o.Decisions[0].Decision.Source != SourceStore {
		t.Fatalf("peek: %+v", o.Decisions)
	}
	return o.Decisions[0].Decision.Remaining
}

func TestSansPipeManyInFlightAreChargedExactly(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: fixed_window, rate: 500/m }`, 2*time.Second)
	pipeReady(t, l)
	before := l.pipe.decided.Load()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed, denied := 0, 0
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				o, err := l.CheckRequest(context.Background(), pipeRequest("198.51.100.5"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if o.Status == 0 {
					allowed++
				} else {
					denied++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 500 || denied != 140 {
		t.Fatalf("allowed %d denied %d, want 500 and 140", allowed, denied)
	}
	if got := l.pipe.decided.Load() - before; got < 320 {
		t.Fatalf("only %d of 640 requests went through the sans-I/O connection", got)
	}
	// Each reply reaches its own request: 64 clients in flight, each with
	// its own key and cost, see their own counts.
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cost := uint64(g%7 + 1)
			for i := 0; i < 10; i++ {
				req := pipeRequest(fmt.Sprintf("203.0.113.%d", g))
				req.Cost = cost
				o, err := l.CheckRequest(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if want := 500 - cost*uint64(i+1); o.Status != 0 || o.Decisions[0].Decision.Remaining != want {
					t.Errorf("client %d request %d: status %d remaining %d, want %d", g, i, o.Status, o.Decisions[0].Decision.Remaining, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSansPipeSilentServerIsDecidedByOnStoreErrorAndChargedOnce(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: fixed_window, rate: 100/m, on_store_error: fail_closed }`, 200*time.Millisecond)
	pipeReady(t, l)
	peer := "198.51.100.6"
	if _, err := l.CheckRequest(context.Background(), pipeRequest(peer)); err != nil {
		t.Fatal(err)
	}
	before := l.pipe.decided.Load()
	sent := pipeSent(l)
	redis.pause()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.CheckRequest(context.Background(), pipeRequest(peer))
			if err == nil && (o.Status != 503 || o.Decisions[0].Decision.Source != SourceFailClosed) {
				err = fmt.Errorf("a request past the timeout: status %d %+v, want decided by on_store_error (fail_closed)", o.Status, o.Decisions)
			}
			errs <- err
		}()
	}
	awaitSent(t, sent)
	wg.Wait()
	took := time.Since(start)
	redis.signal(syscall.SIGCONT)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if took > 3*time.Second {
		t.Fatalf("decided after %v, the timeout is 200ms", took)
	}
	if l.pipe.decided.Load() != before {
		t.Fatal("a silent request counted as answered")
	}
	// The server ran the calls that were sent once it woke: each charged
	// once, never sent again. (A peek answers what a request of 1 would
	// leave: 100 - 1 - n - 1 when every one of them was written.)
	got := remainingOfRequest(t, l, peer)
	if got != 98-n {
		t.Fatalf("remaining %d after %d silent requests, want %d (each charged exactly once)", got, n, 98-n)
	}
	// The dropped connection comes back, and the count has not moved since.
	pipeReady(t, l)
	if again := remainingOfRequest(t, l, peer); again != got {
		t.Fatalf("remaining %d, then %d: a call was sent again", got, again)
	}
}

func TestSansPipeServerKilledWithManyInFlight(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: gcra, rate: 1000/m, on_store_error: fail_open }`, 5*time.Second)
	pipeReady(t, l)
	sent := pipeSent(l)
	redis.pause()
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o, err := l.CheckRequest(context.Background(), pipeRequest(fmt.Sprintf("198.51.100.%d", 10+i)))
			if err == nil && o.Status != 0 {
				err = fmt.Errorf("status %d, want let through by fail_open", o.Status)
			}
			errs <- err
		}(i)
	}
	awaitSent(t, sent)
	start := time.Now()
	redis.signal(syscall.SIGKILL)
	redis.kill()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("decided %v after the server died (the timeout is 5s: the socket's error decides)", took)
	}
	// Restarted on the same port: the connection comes back.
	redis.spawn()
	pipeReady(t, l)
}

func TestSansPipeCloseWithRequestsInFlight(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: token_bucket, rate: 100/m }`, 5*time.Second)
	pipeReady(t, l)
	sent := pipeSent(l)
	redis.pause()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.CheckRequest(context.Background(), pipeRequest("198.51.100.7"))
			if err == nil && o.Status != 0 {
				err = fmt.Errorf("status %d", o.Status)
			}
			var e *Error
			if errors.As(err, &e) && e.Kind == ErrClosed {
				err = nil // went the usual way after Close
			}
			errs <- err
		}()
	}
	awaitSent(t, sent)
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close waited for the requests in flight")
	}
	redis.signal(syscall.SIGCONT)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The connection closes once its calls have their replies.
	for i := 0; clients(t, redis) > 0; i++ {
		if i == 500 {
			t.Fatalf("%d client connections left after Close", clients(t, redis))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSansPipeCancelledRequestKeepsTheConnectionInStep(t *testing.T) {
	redis := startRedis(t)
	l := pipeLimiter(t, redis, `{ algorithm: fixed_window, rate: 10/m }`, 5*time.Second)
	pipeReady(t, l)
	peer := "198.51.100.8"
	sent := pipeSent(l)
	redis.pause()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.CheckRequest(ctx, pipeRequest(peer))
		done <- err
	}()
	awaitSent(t, sent)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a cancelled request waited for its reply")
	}
	redis.signal(syscall.SIGCONT)
	// Charged once (the call was sent), and the next replies match their requests.
	before := l.pipe.decided.Load()
	for i := 0; i < 3; i++ {
		o, err := l.CheckRequest(context.Background(), pipeRequest(peer))
		if err != nil {
			t.Fatal(err)
		}
		if r := o.Decisions[0].Decision.Remaining; r != uint64(8-i) {
			t.Fatalf("request %d: remaining %d, want %d", i, r, 8-i)
		}
	}
	// (The cancelled request's reply may be counted after before was read.)
	if got := l.pipe.decided.Load() - before; got < 3 {
		t.Fatalf("%d of 3 requests on the connection after a cancelled one", got)
	}
}

func TestSansPipeReloadBetweenSendAndReply(t *testing.T) {
	redis := startRedis(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, reloadRules("3/min"))
	l, err := New(Options{RulesFile: path, Store: redis.url(), Prefix: "go-pipe-reload", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pipeReady(t, l)
	sent := pipeSent(l)
	redis.pause()
	done := make(chan *Outcome, 1)
	go func() {
		o, err := l.CheckRequest(context.Background(), pipeRequest("198.51.100.9"))
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	awaitSent(t, sent)
	writeRules(t, path, reloadRules("7/min"))
	if err := l.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	redis.signal(syscall.SIGCONT)
	o := <-done
	if o == nil {
		return
	}
	// The rules changed between its start and its reply: it finishes on the
	// rules it started with, charged once (deciding it again would charge twice).
	if d := o.Decisions[0].Decision; d.Limit != 3 || d.Remaining != 2 {
		t.Fatalf("limit %d remaining %d, want 3 and 2 (the rules it started with)", d.Limit, d.Remaining)
	}
	next, err := l.CheckRequest(context.Background(), pipeRequest("198.51.100.9"))
	if err != nil {
		t.Fatal(err)
	}
	if d := next.Decisions[0].Decision; d.Limit != 7 || d.Remaining != 5 {
		t.Fatalf("next: limit %d remaining %d, want 7 and 5 (the new rules; charged once before)", d.Limit, d.Remaining)
	}
}

// pipeInFlight is the number of requests on l's pipelined connections.
func pipeInFlight(l *Limiter) int {
	if l.pipe == nil {
		return 0
	}
	n := 0
	for _, s := range l.pipe.slots {
		s.mu.Lock()
		if s.cur != nil {
			n += len(s.cur.fifo)
		}
		s.mu.Unlock()
	}
	return n
}

func headerOf(o *Outcome, name string) string {
	for _, h := range o.Headers {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}
