package polylimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/polylimit/polylimit/bindings-go/internal/sansio"
)

// sansIoLimiter is a one-policy limiter on redis with the given timeout.
func sansIoLimiter(t *testing.T, redis *redisServer, policy string, timeout time.Duration) *Limiter {
	t.Helper()
	l, err := New(Options{Rules: fmt.Sprintf(`{"policies": [%s]}`, policy), Store: redis.url(),
		Timeout: timeout, Prefix: "go-sansio"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if l.sio == nil {
		t.Fatal("no sans-I/O path for a plain-TCP standalone Redis")
	}
	return l
}

// sansIoReady checks a warm-up key until a check is decided on the
// limiter's own connection (the first ones go the usual way: they connect
// the core and load its library, while the connection dials).
func sansIoReady(t *testing.T, l *Limiter) {
	t.Helper()
	for i := 0; i < 500; i++ {
		before := l.sio.decided.Load()
		if _, err := l.Check(context.Background(), "warm-up"); err != nil {
			t.Fatal(err)
		}
		if l.sio.decided.Load() > before {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no check went through the sans-I/O connection")
}

// sentOnce makes the next check written on l's sans-I/O connection signal
// the returned channel.
func sentOnce(l *Limiter) chan struct{} {
	sent := make(chan struct{}, 1)
	l.sio.mu.Lock()
	l.sio.sent = func() {
		select {
		case sent <- struct{}{}:
		default:
		}
	}
	l.sio.mu.Unlock()
	return sent
}

// idle waits until no check (nor the reading of a cancelled one's reply)
// uses s's connection.
func idle(t *testing.T, s *sansIo) {
	t.Helper()
	for i := 0; !s.mu.TryLock(); i++ {
		if i == 1000 {
			t.Fatal("the sans-I/O connection stayed busy")
		}
		time.Sleep(2 * time.Millisecond)
	}
	s.mu.Unlock()
}

// sansIoBusy is 1 while a check uses l's sans-I/O connection, else 0.
func sansIoBusy(l *Limiter) int {
	if l.sio == nil {
		return 0
	}
	if l.sio.mu.TryLock() {
		l.sio.mu.Unlock()
		return 0
	}
	return 1
}

func awaitSent(t *testing.T, sent chan struct{}) {
	t.Helper()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("no check was sent on the sans-I/O connection")
	}
}

// clients is the number of client connections redis-server has.
func clients(t *testing.T, redis *redisServer) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", redis.port), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO clients\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		t.Fatalf("INFO: %q %v", head, err)
	}
	size, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	info := string(body)
	var n int
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			fmt.Sscan(v, &n)
		}
	}
	return n - 1 // without the command's own connection
}

func TestSansIoCarriesLoneChecksOnItsOwnConnection(t *testing.T) {
	redis := startRedis(t)
	l := sansIoLimiter(t, redis, `{"rate": "5/m", "algorithm": "fixed_window"}`, time.Second)
	sansIoReady(t, l)
	// The core's connection and the limiter's own.
	if n := clients(t, redis); n != 2 {
		t.Fatalf("%d client connections, want 2 (the core's and the sans-I/O one)", n)
	}
	before := l.sio.decided.Load()
	for i := 0; i < 7; i++ {
		d, err := l.Check(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 5) || d.Source != SourceStore || d.Limit != 5 {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	if got := l.sio.decided.Load() - before; got != 7 {
		t.Fatalf("%d of 7 lone checks went through the sans-I/O connection", got)
	}
	// What the core does not cover goes the usual way: a clock of the caller's.
	if _, err := l.Check(context.Background(), "k", WithNowMs(time.Now().UnixMilli())); err != nil {
		t.Fatal(err)
	}
	if got := l.sio.decided.Load() - before; got != 7 {
		t.Fatal("a check at now_ms went through the sans-I/O connection")
	}
}

func TestSansIoDecidesAsTheUsualPath(t *testing.T) {
	redis := startRedis(t)
	policies := []struct {
		policy  string
		covered bool // by the core's sans-I/O path (the common shapes)
	}{
		{`{"rate": "5/m", "algorithm": "fixed_window"}`, true},
		{`{"rate": "5/m", "algorithm": "token_bucket"}`, true},
		{`{"rate": "5/m", "algorithm": "gcra"}`, true},
		{`{"rate": "5/m", "algorithm": "token_bucket", "burst": 3}`, true},
		{`{"rate": "5/m", "algorithm": "sliding_window_counter"}`, false},
	}
	for _, p := range policies {
		policy := p.policy
		l := sansIoLimiter(t, redis, policy, time.Second)
		if p.covered {
			sansIoReady(t, l)
		} else {
			l.Check(context.Background(), "warm-up")
		}
		run := func(key string, off bool) []Decision {
			sansio.Off.Store(off)
			defer sansio.Off.Store(false)
			var out []Decision
			for i, cost := range []uint64{1, 2, 1, 1, 3, 1, 1} {
				d, err := l.Check(context.Background(), key, WithCost(cost))
				if err != nil {
					t.Fatalf("%s: check %d: %v", policy, i, err)
				}
				out = append(out, d)
			}
			return out
		}
		before := l.sio.decided.Load()
		ours := run("a", false)
		sent := l.sio.decided.Load() - before
		usual := run("b", true)
		if l.sio.decided.Load()-before != sent {
			t.Fatalf("%s: a check went through the sans-I/O connection while it was off", policy)
		}
		if (sent == uint64(len(ours))) != p.covered {
			t.Fatalf("%s: %d of %d checks went through the sans-I/O connection", policy, sent, len(ours))
		}
		for i := range ours {
			a, b := ours[i], usual[i]
			// Times differ by the time between the two runs; counts must not.
			if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.Limit != b.Limit ||
				a.HasRetryAfter != b.HasRetryAfter || a.Source != b.Source ||
				absDuration(a.ResetAfter-b.ResetAfter) > time.Second || absDuration(a.RetryAfter-b.RetryAfter) > time.Second {
				t.Errorf("%s: check %d: sans-I/O %+v, usual %+v", policy, i, a, b)
			}
		}
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// remaining is key's remaining count, through the usual path.
func remainingOf(t *testing.T, l *Limiter, key string) uint64 {
	t.Helper()
	sansio.Off.Store(true)
	defer sansio.Off.Store(false)
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if d.Source != SourceStore {
		t.Fatalf("peek decided by %s", d.Source)
	}
	return d.Remaining
}

func TestSansIoSilentServerIsDecidedByOnStoreErrorAndChargedOnce(t *testing.T) {
	redis := startRedis(t)
	l := sansIoLimiter(t, redis, `{"rate": "10/m", "algorithm": "fixed_window", "on_store_error": "fail_closed"}`,
		200*time.Millisecond)
	sansIoReady(t, l)
	if d, err := l.Check(context.Background(), "k"); err != nil || d.Remaining != 9 {
		t.Fatalf("%+v %v", d, err)
	}
	before := l.sio.decided.Load()
	redis.pause()
	start := time.Now()
	d, err := l.Check(context.Background(), "k")
	took := time.Since(start)
	redis.signal(syscall.SIGCONT)
	if err != nil {
		t.Fatal(err)
	}
	if d.Source != SourceFailClosed || d.Allowed {
		t.Fatalf("a check past the timeout: %+v, want decided by on_store_error (fail_closed)", d)
	}
	if took < 150*time.Millisecond || took > 2*time.Second {
		t.Fatalf("decided after %v, the timeout is 200ms", took)
	}
	if l.sio.decided.Load() != before {
		t.Fatal("the silent check counted as answered")
	}
	// The server ran the call once it woke: charged once, never sent again.
	// (A peek answers what a check of 1 would leave.)
	if got := remainingOf(t, l, "k"); got != 7 {
		t.Fatalf("remaining %d after the silent check, want 7 (charged exactly once)", got)
	}
	// The dropped connection comes back.
	sansIoReady(t, l)
	if got := remainingOf(t, l, "k"); got != 7 {
		t.Fatalf("remaining %d, want 7", got)
	}
}

func TestSansIoServerKilledMidCallIsDecidedByOnStoreError(t *testing.T) {
	redis := startRedis(t)
	l := sansIoLimiter(t, redis, `{"rate": "10/m", "algorithm": "gcra", "on_store_error": "fail_open"}`, 5*time.Second)
	sansIoReady(t, l)
	sent := sentOnce(l)
	redis.pause()
	type result struct {
		d   Decision
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		d, err := l.Check(context.Background(), "k")
		done <- result{d, err}
	}()
	awaitSent(t, sent)
	// SIGKILL while stopped: kill() wakes it first, and it would answer.
	redis.signal(syscall.SIGKILL)
	redis.kill()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.d.Source != SourceFailOpen || !r.d.Allowed {
		t.Fatalf("a check whose server died: %+v, want decided by on_store_error (fail_open)", r.d)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("decided after %v: the closed connection was not noticed", took)
	}
}

func TestSansIoCloseWithACheckInFlight(t *testing.T) {
	redis := startRedis(t)
	base := runtime.NumGoroutine()
	l := sansIoLimiter(t, redis, `{"rate": "10/m", "algorithm": "token_bucket"}`, 5*time.Second)
	sansIoReady(t, l)
	sent := sentOnce(l)
	redis.pause()
	done := make(chan Decision, 1)
	go func() {
		d, err := l.Check(context.Background(), "k")
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	awaitSent(t, sent)
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for the check in flight")
	}
	if _, err := l.Check(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a check after Close: %v", err)
	}
	redis.signal(syscall.SIGCONT)
	if d := <-done; d.Source != SourceStore || d.Remaining != 9 {
		t.Fatalf("the check in flight at Close: %+v, want the store's answer", d)
	}
	// Its connection closes with it, and no goroutine is left.
	for i := 0; ; i++ {
		if clients(t, redis) == 0 && runtime.NumGoroutine() <= base {
			break
		}
		if i == 500 {
			t.Fatalf("%d client connections, %d goroutines (were %d) after Close", clients(t, redis), runtime.NumGoroutine(), base)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSansIoCancelledCheckIsChargedOnceAndKeepsTheConnection(t *testing.T) {
	redis := startRedis(t)
	l := sansIoLimiter(t, redis, `{"rate": "10/m", "algorithm": "fixed_window"}`, 5*time.Second)
	sansIoReady(t, l)
	if d, err := l.Check(context.Background(), "k"); err != nil || d.Remaining != 9 {
		t.Fatalf("%+v %v", d, err)
	}
	for _, how := range []string{"cancel", "deadline"} {
		sent := sentOnce(l)
		redis.pause()
		ctx, cancel := context.WithCancel(context.Background())
		if how == "deadline" {
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := l.Check(ctx, "k")
			done <- err
		}()
		select {
		case <-sent:
		case err := <-done:
			t.Fatalf("%s: the check did not go through the sans-I/O connection (%v)", how, err)
		}
		if how == "cancel" {
			cancel()
		}
		err := <-done
		took := time.Since(start)
		cancel()
		redis.signal(syscall.SIGCONT)
		want := context.Canceled
		if how == "deadline" {
			want = context.DeadlineExceeded
		}
		if !errors.Is(err, want) || took > 2*time.Second {
			t.Fatalf("%s: %v after %v, want %v at once", how, err, took, want)
		}
		idle(t, l.sio)
	}
	// Both reached the server once; the connection stayed in step and carries the next check.
	before := l.sio.decided.Load()
	if d, err := l.Check(context.Background(), "k"); err != nil || d.Remaining != 6 {
		t.Fatalf("%+v %v: want remaining 6 (each cancelled check charged once)", d, err)
	}
	if l.sio.decided.Load() == before {
		t.Fatal("the connection was dropped after a cancelled check")
	}
}

func TestSansIoReconnectsAfterTheServerRestarts(t *testing.T) {
	redis := startRedis(t)
	l := sansIoLimiter(t, redis, `{"rate": "10/m", "algorithm": "fixed_window", "on_store_error": "fail_closed"}`, time.Second)
	sansIoReady(t, l)
	redis.kill()
	redis.spawn()
	// The core reconnects (the usual way; its first check may be a fallback's, as without this path).
	sansio.Off.Store(true)
	for i := 0; ; i++ {
		d, err := l.Check(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == SourceStore {
			break
		}
		if i == 500 {
			t.Fatal("the core did not reconnect")
		}
		time.Sleep(2 * time.Millisecond)
	}
	sansio.Off.Store(false)
	// The stale connection is found before a check is sent on it: no fallback decision.
	for i := 0; i < 20; i++ {
		d, err := l.Check(context.Background(), fmt.Sprint("after-", i))
		if err != nil {
			t.Fatal(err)
		}
		if d.Source != SourceStore {
			t.Fatalf("check %d after the restart: %+v", i, d)
		}
	}
	sansIoReady(t, l)
}
