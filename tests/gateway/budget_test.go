package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/polylimit/polylimit/tests/gateway/harness"
)

// One rules file for the server and the apps, the examples' payments rule:
// per user and route template. Each edge is told both as the apps know them:
// Envoy's descriptor carries user and route entries, nginx's site passes
// /check the X-User header and the location's template, as a direct /check
// caller (Traefik, Caddy) does in its URL.
const budgetRules = `store: %s
timeout: 10s   # decisions, not latency: a loaded machine must not fall back
headers: both
policies:
  payments: { algorithm: token_bucket, rate: 1/min, burst: 30 }
rules:
  - { name: payments, match: { method: POST, path: /api/payments/* }, key: [user, route], policy: payments }
`

// payer is one way a payment reaches the limit: it reports admitted or denied.
type payer struct {
	name string
	pay  func(i int, user string) (admitted bool, err error)
}

func TestOneBudget(t *testing.T) {
	redis, err := harness.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Kill()
	rules := filepath.Join(t.TempDir(), "polylimit.yaml")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf(budgetRules, redis.URL())), 0o644); err != nil {
		t.Fatal(err)
	}
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
	// What nginx lets through reaches a backend that limits nothing.
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"paid":true}`))
	}))
	defer backend.Close()
	nginx, err := harness.StartNginx(server.HTTP, backend.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nginx.Stop()
	payers := []payer{grpcPayer(client), checkPayer(server.HTTP), appPayer("nginx", nginx.Addr())}
	for _, name := range []string{"fastapi", "go"} {
		app, err := harness.StartApp(name, rules)
		if err != nil {
			t.Fatal(err)
		}
		defer app.Stop()
		payers = append(payers, appPayer(name, app.Addr()))
	}

	user := fmt.Sprintf("user-%d", time.Now().UnixNano())
	admitted := map[string]int{}
	denied := 0
	var failures []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := payers[i%len(payers)]
				ok, err := p.pay(i, user)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("payment %d through %s: %v", i, p.name, err))
				case ok:
					admitted[p.name]++
				default:
					denied++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 300; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d payments failed, the first: %s", len(failures), strings.Join(failures[:min(5, len(failures))], "; "))
	}
	total := 0
	var by []string
	for name, n := range admitted {
		total += n
		by = append(by, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(by)
	if total != 30 || denied != 270 {
		t.Fatalf("300 payments through %d ways: %d admitted (%v), %d denied; want exactly the burst, 30, and 270 denied", len(payers), total, by, denied)
	}
	t.Logf("300 payments: 30 admitted (%v), 270 denied", by)
}

// grpcPayer asks the server's RLS as Envoy would, with the request's method,
// path and X-User header as descriptor entries.
func grpcPayer(c *harness.Client) payer {
	return payer{"gRPC", func(i int, user string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		reply, err := c.ShouldRateLimit(ctx, "polylimit", 0, harness.Descriptor(nil,
			harness.Entry{Key: ":method", Value: "POST"},
			harness.Entry{Key: ":path", Value: fmt.Sprintf("/api/payments/%d", i)},
			harness.Entry{Key: "route", Value: "/api/payments/{id}"},
			harness.Entry{Key: "user", Value: user}))
		if err != nil {
			return false, err
		}
		return reply.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
	}}
}

// checkPayer asks /check as Traefik's ForwardAuth or Caddy's forward_auth does.
func checkPayer(addr string) payer {
	return payer{"/check", func(i int, user string) (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/check?user_header=x-user&route=/api/payments/%7Bid%7D", nil)
		req.Header.Set("X-Forwarded-Method", "POST")
		req.Header.Set("X-Forwarded-Uri", fmt.Sprintf("/api/payments/%d", i))
		req.Header.Set("X-User", user)
		return admittedStatus(http.DefaultClient.Do(req))
	}}
}

// appPayer pays through an example app's own middleware, or nginx.
func appPayer(name, addr string) payer {
	return payer{name, func(i int, user string) (bool, error) {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/api/payments/%d", addr, i), nil)
		req.Header.Set("X-User", user)
		return admittedStatus(http.DefaultClient.Do(req))
	}}
}

// admittedStatus is 200 admitted, 429 denied, anything else an error.
func admittedStatus(res *http.Response, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("status %d", res.StatusCode)
}
