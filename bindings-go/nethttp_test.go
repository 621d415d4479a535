package polylimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(body)}
}

func statuses(t *testing.T, url string, n int, header ...string) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = get(t, url, header...).status
	}
	return out
}

// The example app's limit: 1/s with a burst of 10, per client IP.
func apiServer(t *testing.T, store string) *httptest.Server {
	srv, _ := apiServerAndLimiter(t, store)
	return srv
}

// apiServer and the limiter its middleware checks through.
func apiServerAndLimiter(t *testing.T, store string) (*httptest.Server, *Limiter) {
	// Decisions, not latency: under load a store call past the default 100ms goes to the local fallback.
	l := newLimiter(t, Options{Policy: &Policy{Name: "api", Rate: "1/s", Burst: 10}, Store: store,
		Prefix: fmt.Sprintf("go-http-%d", time.Now().UnixNano()), Timeout: 10 * time.Second})
	srv := httptest.NewServer(l.Middleware()(hello))
	t.Cleanup(srv.Close)
	return srv, l
}

func TestMiddlewareScenarios(t *testing.T) {
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Run("15 sequential: 10 pass, 5 get 429", func(t *testing.T) {
				srv := apiServer(t, url)
				before := time.Now()
				first := get(t, srv.URL)
				after := time.Now()
				if first.status != 200 || first.body != "hello" {
					t.Fatalf("%+v", first)
				}
				// Exact headers; the reset is epoch seconds of now + 1s (one token at 1/s).
				reset, _ := strconv.ParseInt(first.header.Get("X-RateLimit-Reset"), 10, 64)
				lo, hi := int64(math.Ceil(float64(before.UnixMilli()+1000)/1000)), int64(math.Ceil(float64(after.UnixMilli()+1000)/1000))
				if reset < lo || reset > hi {
					t.Fatalf("X-RateLimit-Reset %d not in [%d, %d]", reset, lo, hi)
				}
				want := map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "9",
					"Ratelimit-Policy": `"api";q=10;w=10`, "Ratelimit": `"api";r=9;t=1`}
				for k, v := range want {
					if got := first.header.Values(k); len(got) != 1 || got[0] != v {
						t.Errorf("%s: %q, want %q", k, got, v)
					}
				}
				if first.header.Get("Retry-After") != "" {
					t.Error("Retry-After on a 200")
				}
				got := append([]int{200}, statuses(t, srv.URL, 14)...)
				want200 := []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429, 429, 429, 429}
				if fmt.Sprint(got) != fmt.Sprint(want200) {
					t.Fatalf("statuses %v", got)
				}
				denied := get(t, srv.URL)
				if denied.status != 429 || denied.body != `{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":1}` ||
					denied.header.Get("Content-Type") != "application/json" || denied.header.Get("Retry-After") != "1" ||
					denied.header.Get("X-RateLimit-Remaining") != "0" || denied.header.Get("RateLimit") != `"api";r=0;t=10` {
					t.Fatalf("429: %+v", denied)
				}
			})
			t.Run("50 concurrent: exactly 10 pass", func(t *testing.T) {
				srv := apiServer(t, url)
				var wg sync.WaitGroup
				var mu sync.Mutex
				count := map[int]int{}
				for i := 0; i < 50; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s := get(t, srv.URL).status
						mu.Lock()
						count[s]++
						mu.Unlock()
					}()
				}
				wg.Wait()
				if count[200] != 10 || count[429] != 40 {
					t.Fatalf("%v", count)
				}
			})
			// No sleep: the bucket is drained through the middleware's own
			// limiter with NowMs 2 s in the past (the same rule and key as a
			// request from this client); the requests that follow are decided
			// on the store's clock, now.
			t.Run("drained 2s ago: 200 200 429", func(t *testing.T) {
				srv, l := apiServerAndLimiter(t, url)
				twoSecondsAgo := time.Now().UnixMilli() - 2000
				drain := &RequestInfo{Method: "GET", Path: "/", Peer: "127.0.0.1", NowMs: &twoSecondsAgo}
				for i := 0; i <= 10; i++ {
					out, err := l.CheckRequest(context.Background(), drain)
					if err != nil {
						t.Fatal(err)
					}
					want := 0 // through
					if i == 10 {
						want = 429
					}
					if out.Status != want {
						t.Fatalf("drain %d: status %d, want %d", i, out.Status, want)
					}
				}
				if got := statuses(t, srv.URL, 3); fmt.Sprint(got) != "[200 200 429]" {
					t.Fatalf("%v", got)
				}
			})
		})
	}
}

func TestMiddlewareFailsClosedWith503WhenRedisIsDown(t *testing.T) {
	redis := startRedis(t)
	url := redis.url()
	redis.kill()
	l, err := FromRules(fmt.Sprintf(`
store: %s
timeout: 50ms
policies:
  payments: { algorithm: gcra, rate: 1/s, burst: 5, on_store_error: fail_closed }
  api: { rate: 1/s, burst: 10 }
rules:
  - match: { method: POST, path: /api/payments/* }
    key: [ip]
    policy: payments
  - match: { path: /api/* }
    key: [ip]
    policy: api
`, url))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.Middleware()(hello))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/api/payments/1", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || string(body) != `{"error":"rate_limiter_unavailable","message":"Service Unavailable","retry_after":1}` ||
		res.Header.Get("Retry-After") != "1" || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s %v", res.StatusCode, body, res.Header)
	}
	// The api policy falls back to the local limiter: served.
	if a := get(t, srv.URL+"/api/x"); a.status != 200 || a.header.Get("X-RateLimit-Remaining") != "9" {
		t.Fatalf("%+v", a)
	}
}

// The classic composition: a global per-IP limit, a per-route limit and a
// per-user limit, by nesting three middlewares and by one rules file. Both
// enforce all three limits; they differ in one way the test pins down: a
// rules file decides a request's limits atomically (nothing is charged when
// one denies), while nested middlewares have charged the outer limits before
// an inner one denies.
func TestCompositionByNestingAndByRulesFile(t *testing.T) {
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			user := WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") })
			prefix := fmt.Sprintf("go-compose-%d", time.Now().UnixNano())
			perIP := newLimiter(t, Options{Policy: &Policy{Name: "global", Rate: "1/min", Burst: 6}, Store: url, Prefix: prefix + "-n"})
			perRoute := newLimiter(t, Options{Policy: &Policy{Name: "search", Rate: "1/min", Burst: 4}, Store: url, Prefix: prefix + "-n",
				KeyBy: []string{"ip", "route"}})
			perUser := newLimiter(t, Options{Policy: &Policy{Name: "user", Rate: "1/min", Burst: 2}, Store: url, Prefix: prefix + "-n",
				KeyBy: []string{"user"}})
			mux := http.NewServeMux()
			mux.Handle("/search", perRoute.Middleware()(hello))
			mux.Handle("/", hello)
			nested := httptest.NewServer(perIP.Middleware()(perUser.Middleware(user)(mux)))
			plain := http.NewServeMux()
			plain.Handle("/", hello)
			defer nested.Close()

			rules, err := FromRules(fmt.Sprintf(`
store: %q
timeout: 10s
prefix: %s-r
policies:
  global: { rate: 1/min, burst: 6 }
  search: { rate: 1/min, burst: 4 }
  user:   { rate: 1/min, burst: 2 }
rules:
  - { key: [ip], policy: global }
  - { match: { path: /search }, key: [ip, route], policy: search }
  - { key: [user], policy: user }
`, url, prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer rules.Close()
			file := httptest.NewServer(rules.Middleware(user)(plain))
			defer file.Close()

			for _, c := range []struct {
				name string
				srv  *httptest.Server
				want string
			}{
				// Atomic: alice's and the route's denials charge nothing, so the
				// IP limit (6) lets two more through.
				{"rules file", file, "[200 200 429 200 200 429 200 200 429]"},
				// Nested: the outer per-IP limit was charged by the two denied requests.
				{"nested", nested, "[200 200 429 200 200 429 429 429 429]"},
			} {
				srv := c.srv
				var got []int
				// alice: 2 pass, then her own limit (2); bob's search passes; anonymous
				// searches hit the route limit (4), then other paths the IP limit (6).
				got = append(got, statuses(t, srv.URL+"/search", 3, "X-User", "alice")...)
				got = append(got, statuses(t, srv.URL+"/search", 1, "X-User", "bob")...)
				got = append(got, statuses(t, srv.URL+"/search", 2)...)
				got = append(got, statuses(t, srv.URL+"/other", 2)...)
				got = append(got, statuses(t, srv.URL+"/other", 1, "X-User", "carol")...)
				if fmt.Sprint(got) != c.want {
					t.Errorf("%s: %v, want %s", c.name, got, c.want)
				}
			}
		})
	}
}

func TestMiddlewareHoldsShapedRequestsForTheirDelay(t *testing.T) {
	l := newLimiter(t, Options{Policy: &Policy{Name: "shape", Algorithm: "leaky_bucket", Mode: "shape", Rate: "1/s", Burst: 3}})
	srv := httptest.NewServer(l.Middleware()(hello))
	defer srv.Close()
	// 1/s with a queue of 3: at once, four requests are served after about
	// 0, 1000 and 2000 ms, and the fourth is refused (it would wait 3 s).
	// Steps of a second: the first answer has half of one to arrive on a
	// loaded CI host.
	type result struct {
		status int
		took   time.Duration
	}
	results := make(chan result, 4)
	start := time.Now()
	for i := 0; i < 4; i++ {
		go func() {
			a := get(t, srv.URL)
			results <- result{a.status, time.Since(start)}
		}()
	}
	var served []time.Duration
	refused := 0
	for i := 0; i < 4; i++ {
		r := <-results
		switch r.status {
		case 200:
			served = append(served, r.took)
		case 429:
			refused++
		}
	}
	if len(served) != 3 || refused != 1 {
		t.Fatalf("served %v, refused %d", served, refused)
	}
	if served[0] > 500*time.Millisecond || served[1] < 900*time.Millisecond || served[2] < 1900*time.Millisecond {
		t.Fatalf("served after %v", served)
	}
}

// Wrapping a whole ServeMux, the route is the pattern the mux picks, in the
// core's canonical form, so a rule on "/items/:id" (as Express writes it)
// matches and every item shares one route key.
func TestMiddlewareAroundAServeMuxKnowsTheRoute(t *testing.T) {
	l, err := FromRules(`
headers: legacy
policies:
  items: { rate: 1/min, burst: 2 }
rules:
  - { match: { route: "/items/:id" }, key: [route], policy: items }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", hello)
	mux.Handle("GET /other", hello)
	srv := httptest.NewServer(l.Middleware()(mux))
	defer srv.Close()

	got := []int{get(t, srv.URL+"/items/1").status, get(t, srv.URL+"/items/2").status, get(t, srv.URL+"/items/3").status}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("items: %v, want [200 200 429]", got)
	}
	if other := get(t, srv.URL+"/other"); other.status != 200 || other.header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/other: %d %v, want 200 without rate-limit headers", other.status, other.header)
	}
}

// serveUnix serves h on a Unix socket, as behind nginx over one; the client
// dials that socket whatever the URL's host.
func serveUnix(t *testing.T, h http.Handler) (*http.Client, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	t.Cleanup(client.CloseIdleConnections)
	return client, "http://unix"
}

func statusVia(t *testing.T, client *http.Client, method, url string, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func TestMiddlewareOnAUnixSocket(t *testing.T) {
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			opts := func(trusted ...string) Options {
				return Options{Policy: &Policy{Rate: "1/min", Burst: 1}, Store: url, TrustedProxies: trusted,
					Prefix: fmt.Sprintf("go-unix-%d", time.Now().UnixNano())}
			}
			var peers []string
			seen := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					peers = append(peers, r.RemoteAddr)
					next.ServeHTTP(w, r)
				})
			}
			// Without unix trusted, every request is the one client "unknown": limited, never skipped.
			client, base := serveUnix(t, seen(newLimiter(t, opts("10.0.0.0/8")).Middleware()(hello)))
			got := []int{
				statusVia(t, client, "GET", base+"/x", "X-Forwarded-For", "198.51.100.1"),
				statusVia(t, client, "GET", base+"/x", "X-Forwarded-For", "198.51.100.2"),
			}
			if fmt.Sprint(got) != "[200 429]" {
				t.Errorf("untrusted unix peer: %v, want [200 429] (peers %q)", got, peers)
			}
			// With unix trusted, the proxy's X-Forwarded-For names the client.
			client, base = serveUnix(t, newLimiter(t, opts("unix")).Middleware()(hello))
			got = []int{
				statusVia(t, client, "GET", base+"/x", "X-Forwarded-For", "198.51.100.1"),
				statusVia(t, client, "GET", base+"/x", "X-Forwarded-For", "198.51.100.1"),
				statusVia(t, client, "GET", base+"/x", "X-Forwarded-For", "198.51.100.2"),
			}
			if fmt.Sprint(got) != "[200 429 200]" {
				t.Errorf("unix trusted: %v, want [200 429 200]", got)
			}
		})
	}
}

func TestMiddlewareForwardedHeaderOption(t *testing.T) {
	l := newLimiter(t, Options{Policy: &Policy{Rate: "1/min", Burst: 1}, TrustedProxies: []string{"127.0.0.0/8"},
		ForwardedHeader: "forwarded"})
	srv := httptest.NewServer(l.Middleware()(hello))
	defer srv.Close()
	// The proxy sends Forwarded; an X-Forwarded-For added by the client does not pick the key.
	got := []int{
		get(t, srv.URL, "Forwarded", "for=198.51.100.7", "X-Forwarded-For", "203.0.113.1").status,
		get(t, srv.URL, "Forwarded", "for=198.51.100.7", "X-Forwarded-For", "203.0.113.2").status,
		get(t, srv.URL, "Forwarded", "for=198.51.100.8").status,
	}
	if fmt.Sprint(got) != "[200 429 200]" {
		t.Errorf("got %v, want [200 429 200]", got)
	}
	_, err := New(Options{Policy: &Policy{Rate: "1/s"}, ForwardedHeader: "x-real-ip"})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "ForwardedHeader" || !strings.Contains(ce.Message, `"x-real-ip" is not one of x-forwarded-for, forwarded`) {
		t.Errorf("bad ForwardedHeader: %v", err)
	}
}

func TestMiddlewareHeadAndAbsoluteFormTargets(t *testing.T) {
	l, err := FromRules(`
headers: none
policies:
  api: { rate: 1/min, burst: 1 }
rules:
  - { match: { method: GET, path: /api/items }, key: [global], policy: api }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /api/items", hello)
	srv := httptest.NewServer(l.Middleware()(mux))
	defer srv.Close()
	// HEAD is served by the GET route and limited by the GET rule.
	if got := []int{statusVia(t, srv.Client(), "HEAD", srv.URL+"/api/items"), get(t, srv.URL+"/api/items").status}; fmt.Sprint(got) != "[200 429]" {
		t.Errorf("HEAD then GET: %v, want [200 429]", got)
	}

	l2, err := FromRules(`
headers: none
policies:
  api: { rate: 1/min, burst: 1 }
rules:
  - { match: { path: /api/items }, key: [global], policy: api }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	srv2 := httptest.NewServer(l2.Middleware()(mux))
	defer srv2.Close()
	// An absolute-form target, as a client talking to a proxy sends it.
	conn, err := net.Dial("tcp", srv2.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET http://evil.example/api/items?x=1 HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := []int{res.StatusCode, get(t, srv2.URL+"/api/items").status}; fmt.Sprint(got) != "[200 429]" {
		t.Errorf("absolute-form then origin-form: %v, want [200 429]", got)
	}
}

// WithKeyFunc gives the "key" dimension; a limiter whose rules never read it
// (KeyBy defaults to ["ip"], the core's default) refuses each request with a
// ConfigError naming key, answered by the error handler, rather than keying by
// the client IP and ignoring the function. With KeyBy ["key"] it keys the rule.
func TestMiddlewareKeyFuncNeedsARuleReadingKey(t *testing.T) {
	tenant := WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Tenant") })
	var mu sync.Mutex
	var got error
	onError := WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		mu.Lock()
		got = err
		mu.Unlock()
		http.Error(w, err.Error(), http.StatusInternalServerError)
	})
	byIP := newLimiter(t, Options{Policy: &Policy{Rate: "1/min", Burst: 1}})
	srv := httptest.NewServer(byIP.Middleware(tenant, onError)(hello))
	defer srv.Close()
	if s := get(t, srv.URL, "X-Tenant", "a").status; s != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", s)
	}
	mu.Lock()
	err := got
	mu.Unlock()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "key" {
		t.Fatalf("error %v, want a ConfigError naming key", err)
	}
	// No key from the function (""): nothing to ignore, the rule keys by IP.
	if s := get(t, srv.URL).status; s != http.StatusOK {
		t.Fatalf("status %d without a key, want 200", s)
	}

	byKey := newLimiter(t, Options{Policy: &Policy{Rate: "1/min", Burst: 1}, KeyBy: []string{"key"}})
	keyed := httptest.NewServer(byKey.Middleware(tenant, onError)(hello))
	defer keyed.Close()
	var codes []int
	for _, tenantID := range []string{"a", "b", "a", "b"} {
		codes = append(codes, get(t, keyed.URL, "X-Tenant", tenantID).status)
	}
	if fmt.Sprint(codes) != "[200 200 429 429]" {
		t.Fatalf("statuses %v, want one budget per key", codes)
	}
}

// The path is matched as sent: an escaped slash is no "/" and a "%25" no
// "%" (net/http's r.URL.Path has decoded both), while escapes of unreserved
// characters are decoded by the core.
func TestMiddlewareMatchesThePathAsSent(t *testing.T) {
	l, err := FromRules(`
headers: legacy
policies:
  api: { rate: 1/min, burst: 5 }
rules:
  - { match: { path: /api/* }, key: [ip], policy: api }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.Middleware()(hello))
	defer srv.Close()
	for path, limited := range map[string]bool{"/api/x": true, "/%61pi/x": true, "/api%2Fx": false, "/%2561pi/x": false} {
		if got := get(t, srv.URL+path).header.Get("X-RateLimit-Limit") != ""; got != limited {
			t.Errorf("%s: limited %v, want %v", path, got, limited)
		}
	}
}
