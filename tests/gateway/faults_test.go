package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/polylimit/polylimit/tests/gateway/harness"
)

// writeRules writes a rules file into the test's directory.
func writeRules(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "polylimit.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The timeout of the fallback test: a stopped Redis is given up on after it.
const pausedTimeout = 300 * time.Millisecond

const pausedRules = `store: %s
timeout: 300ms
headers: legacy
policies:
  local:  { algorithm: token_bucket, rate: 1/min, burst: 5, on_store_error: local }
  open:   { algorithm: token_bucket, rate: 1/min, burst: 5, on_store_error: fail_open }
  closed: { algorithm: token_bucket, rate: 1/min, burst: 5, on_store_error: fail_closed }
rules:
  - { match: { path: /local }, key: [ip], policy: local }
  - { match: { path: /open }, key: [ip], policy: open }
  - { match: { path: /closed }, key: [ip], policy: closed }
`

// Redis SIGSTOPped: every policy's fallback answers through gRPC and /check
// within the timeout (plus this machine's scheduling), never hangs: local
// decides on the server's own counters, fail_open lets through without
// headers, fail_closed refuses with the 503 body.
func TestRedisPausedFallback(t *testing.T) {
	redis, err := harness.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Kill()
	server, err := harness.StartServer(harness.ServerOptions{Rules: writeRules(t, fmt.Sprintf(pausedRules, redis.URL()))})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	client, err := harness.Dial(server.Grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ask := func(path string) (*rlsv3.RateLimitResponse, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		began := time.Now()
		reply, err := client.ShouldRateLimit(ctx, "polylimit", 0, harness.Descriptor(nil,
			harness.Entry{Key: "remote_address", Value: "203.0.113.7"}, harness.Entry{Key: "path", Value: path}))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return reply, time.Since(began)
	}
	check := func(path string) (int, http.Header, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+server.HTTP+"/check", nil)
		req.Header.Set("X-Forwarded-Uri", path)
		began := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("/check %s: %v", path, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(body), time.Since(began)
	}
	// Through Redis first: each policy has spent one of its 5.
	for _, path := range []string{"/local", "/open", "/closed"} {
		if reply, _ := ask(path); reply.GetOverallCode() != rlsv3.RateLimitResponse_OK || reply.GetStatuses()[0].GetLimitRemaining() != 4 {
			t.Fatalf("%s before the pause: %v", path, reply)
		}
	}
	if err := redis.Pause(); err != nil {
		t.Fatal(err)
	}
	// The timeout, and this loaded machine's scheduling of the server.
	within := pausedTimeout + 700*time.Millisecond
	reply, took := ask("/local")
	first := took
	if reply.GetOverallCode() != rlsv3.RateLimitResponse_OK || took > within {
		t.Errorf("/local with Redis stopped: %v in %v; want OK from the local fallback within %v", reply, took, within)
	}
	reply, took = ask("/open")
	if reply.GetOverallCode() != rlsv3.RateLimitResponse_OK || took > within {
		t.Errorf("/open with Redis stopped: %v in %v; want OK within %v", reply, took, within)
	}
	reply, took = ask("/closed")
	if reply.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !unavailable(reply.GetRawBody()) || took > within {
		t.Errorf("/closed with Redis stopped: %v in %v; want OVER_LIMIT with the 503 body within %v", reply, took, within)
	}
	code, _, _, took := check("/local")
	if code != http.StatusOK || took > within {
		t.Errorf("/check /local with Redis stopped: %d in %v", code, took)
	}
	code, _, body, took := check("/closed")
	if code != http.StatusServiceUnavailable || !unavailable([]byte(body)) || took > within {
		t.Errorf("/check /closed with Redis stopped: %d %q in %v; want 503 with its body", code, body, took)
	}
	// The first call waited out the timeout and opened the breaker; the
	// others went straight to their fallback.
	t.Logf("with Redis stopped: the first call answered in %v (timeout %v), the last in %v", first, pausedTimeout, took)
}

// unavailable is whether body is the 503 refusal's (its retry_after is the
// breaker's wait, which depends on when it opened).
func unavailable(body []byte) bool {
	var refusal struct {
		Error, Message string
		RetryAfter     *int `json:"retry_after"`
	}
	return json.Unmarshal(body, &refusal) == nil && refusal.Error == "rate_limiter_unavailable" &&
		refusal.Message == "Service Unavailable" && refusal.RetryAfter != nil && *refusal.RetryAfter >= 1
}

const restartRules = `store: %s
timeout: 10s   # decisions, not latency
headers: legacy
policies:
  budget: { algorithm: fixed_window, rate: %d/h }
rules:
  - { match: { path: "/*" }, key: [key], policy: budget }
`

// The server stopped and started again while 16 clients keep calling: every
// call gets an answer or a transport error the client sees (none hangs, none
// is answered twice), the admitted calls never exceed the budget, and every
// charge in Redis was answered OK or failed before the client got it (with
// SIGTERM, which finishes the calls in flight: answered OK, exactly).
func TestRestartUnderLoad(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { restartUnderLoad(t, sig) })
	}
}

func restartUnderLoad(t *testing.T, sig syscall.Signal) {
	const budget, calls, workers = 300, 2000, 16
	redis, err := harness.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Kill()
	rules := writeRules(t, fmt.Sprintf(restartRules, redis.URL(), budget))
	// The same window throughout: the test clock pins now.
	options := harness.ServerOptions{Rules: rules, TrustClientClock: true}
	server, err := harness.StartServer(options)
	if err != nil {
		t.Fatal(err)
	}
	// The next server listens on the same addresses, where the client reconnects.
	options.Grpc, options.HTTP = server.Grpc, server.HTTP
	// Reconnect quickly: grpc-go's default backoff starts at 1 s.
	client, err := harness.Dial(server.Grpc, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	now := time.Now().UnixMilli()
	key := fmt.Sprintf("run-%d", now)
	restarted := make(chan struct{})
	loaded := make(chan struct{}) // closed when a third of the budget is admitted
	call := func() (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(harness.WithNow(context.Background(), now), 20*time.Second)
		defer cancel()
		// Once the server is back, a call waits for the connection instead
		// of failing while the client reconnects.
		return client.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "polylimit",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{harness.Descriptor(nil, harness.Entry{Key: "key", Value: key})}},
			grpc.WaitForReady(closed(restarted)))
	}

	var next, ok, over, transport atomic.Int64
	// Set just before the server is stopped: a transport error before it is
	// a failure of its own, not the restart (and must not park a worker).
	var stopping atomic.Bool
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= calls {
				reply, err := call()
				switch {
				case status.Code(err) == codes.Unavailable && !stopping.Load():
					mu.Lock()
					failures = append(failures, "before the restart: "+err.Error())
					mu.Unlock()
				case status.Code(err) == codes.Unavailable:
					transport.Add(1) // refused or cut: the client knows
					<-restarted      // and calls again once the server is back
				case err != nil:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				case reply.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					if ok.Add(1) == budget/3 {
						close(loaded)
					}
				default:
					over.Add(1)
				}
				// Before the restart, leave budget for after it.
				if ok.Load() >= budget/2 {
					<-restarted
				}
			}
		}()
	}
	// Under load: stop the server with calls in flight, start it again.
	// (Every call may also end before that: then the test fails, not hangs.)
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	select {
	case <-loaded:
	case <-workersDone:
		t.Fatalf("every call ended before a third of the budget was admitted (%d OK, %d over); failures: %v",
			ok.Load(), over.Load(), failures[:min(5, len(failures))])
	}
	stopping.Store(true)
	if err := server.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-server.Exited()
	if sig == syscall.SIGTERM && server.ExitCode() != 0 {
		t.Errorf("SIGTERM: exit code %d, want 0:\n%s", server.ExitCode(), server.Log())
	}
	beforeRestart := ok.Load()
	server, err = harness.StartServer(options)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	close(restarted)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d calls failed otherwise than by the transport (a call lost?): %v", len(failures), failures[:min(5, len(failures))])
	}
	// What Redis charged: one more call reads the window's remaining.
	reply, err := call()
	if err != nil {
		t.Fatal(err)
	}
	charged := int64(budget) - int64(reply.GetStatuses()[0].GetLimitRemaining())
	if reply.GetOverallCode() == rlsv3.RateLimitResponse_OK {
		charged-- // this call's own charge
	}
	t.Logf("%v: %d calls: %d OK (%d before the restart), %d over the limit, %d transport errors; %d charged of %d",
		sig, calls, ok.Load(), beforeRestart, over.Load(), transport.Load(), charged, budget)
	if got := ok.Load() + over.Load() + transport.Load(); got != calls {
		t.Errorf("%d answers for %d calls", got, calls)
	}
	if ok.Load() > budget {
		t.Errorf("%d admitted, over the budget of %d", ok.Load(), budget)
	}
	if ok.Load() > charged || charged > ok.Load()+transport.Load() {
		t.Errorf("%d charged: not between the %d admitted and those plus the %d transport errors", charged, ok.Load(), transport.Load())
	}
	if sig == syscall.SIGTERM && charged != ok.Load() {
		t.Errorf("SIGTERM: %d charged but %d answered OK: a call in flight was not finished", charged, ok.Load())
	}
	if transport.Load() == 0 {
		t.Errorf("no call met the restart: not under load")
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

const reloadRules = `store: %s
timeout: 10s
policies:
  api: { algorithm: fixed_window, rate: %s }
rules:
  - { match: { path: "/*" }, key: [key], policy: api }
`

// SIGHUP while 8 clients keep calling: a bad rules file keeps the old rules
// (the error names the field), a good one takes effect; no call fails and
// every answer is the old rules' or the new ones'.
func TestReloadUnderLoad(t *testing.T) {
	redis, err := harness.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Kill()
	rules := writeRules(t, fmt.Sprintf(reloadRules, redis.URL(), "1000000/h"))
	server, err := harness.StartServer(harness.ServerOptions{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	client, err := harness.Dial(server.Grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	limit := func() (uint32, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		reply, err := client.ShouldRateLimit(ctx, "polylimit", 0, harness.Descriptor(nil, harness.Entry{Key: "key", Value: "reload"}))
		if err != nil {
			return 0, err
		}
		return reply.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), nil
	}

	stop := make(chan struct{})
	var mu sync.Mutex
	seen := map[uint32]int{}
	var failures []string
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !closed(stop) {
				n, err := limit()
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					seen[n]++
				}
				mu.Unlock()
			}
		}()
	}
	// Bad, good, bad, good…: each good file doubles the limit.
	limits := []string{"1000000/h", "2000000/h", "4000000/h"}
	for round := 1; round < len(limits); round++ {
		if err := os.WriteFile(rules, []byte(fmt.Sprintf(reloadRules, redis.URL(), limits[round])+"  - { match: { path: \"/*\" }, key: [ip], policy: nope }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := server.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		failed, err := server.WaitLog("rules reload failed, the previous rules stay in force", round, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if msg := fmt.Sprint(failed["error"]); !strings.Contains(msg, "nope") {
			t.Errorf("the reload error does not name the unknown policy: %s", msg)
		}
		if n, err := limit(); err != nil || n != uint32(1000000<<(round-1)) {
			t.Fatalf("after a bad file: limit %d (%v), want the old rules' %d", n, err, 1000000<<(round-1))
		}
		if err := os.WriteFile(rules, []byte(fmt.Sprintf(reloadRules, redis.URL(), limits[round])), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := server.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if _, err := server.WaitLog("rules reloaded", round, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if n, err := limit(); err != nil || n != uint32(1000000<<round) {
			t.Fatalf("after a good file: limit %d (%v), want %d", n, err, 1000000<<round)
		}
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d calls failed during the reloads, the first: %v", len(failures), failures[:min(5, len(failures))])
	}
	for n := range seen {
		if n != 1000000 && n != 2000000 && n != 4000000 {
			t.Errorf("an answer with limit %d, neither the old rules' nor the new", n)
		}
	}
	t.Logf("calls during the reloads, by the limit they saw: %v", seen)
}

// A supervisor may signal as soon as it reads the listening line: SIGHUP
// then reloads and SIGTERM stops cleanly (exit 0), where the signal's default
// action would kill the process.
func TestSignalsRightAfterListening(t *testing.T) {
	rules := writeRules(t, "store: memory\npolicies: { api: { rate: 1/s } }\nrules: [{ match: { path: \"/*\" }, key: [ip], policy: api }]\n")
	for i := 0; i < 5; i++ {
		server, err := harness.StartServer(harness.ServerOptions{Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if _, err := server.WaitLog("rules reloaded", 1, 10*time.Second); err != nil {
			server.Kill()
			t.Fatalf("SIGHUP right after listening: %v (exit %v)", err, server.ExitCode())
		}
		server.Stop()
		server, err = harness.StartServer(harness.ServerOptions{Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-server.Exited():
		case <-time.After(10 * time.Second):
			server.Kill()
			t.Fatal("SIGTERM right after listening: still running after 10 s")
		}
		if server.ExitCode() != 0 {
			t.Fatalf("SIGTERM right after listening: exit %d, want 0:\n%s", server.ExitCode(), server.Log())
		}
	}
}
