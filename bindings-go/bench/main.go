// Command bench prints polylimit's Go throughput next to named peers measured
// in the same run (`make go-bench`):
//   - decisions/s with 64 goroutines on one real Redis: polylimit (gcra) vs
//     github.com/go-redis/redis_rate (GCRA over go-redis);
//   - net/http requests/s through the middleware vs an unlimited handler.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/redis/go-redis/v9"
)

const (
	goroutines = 64
	keys       = 1000
	duration   = 3 * time.Second
	rounds     = 3
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// startRedis runs redis-server on a free loopback port without persistence.
func startRedis() (addr string, stop func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	must(cmd.Start())
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; i < 500; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Write([]byte("PING\r\n"))
			reply, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(reply, "+PONG") {
				return addr, func() { cmd.Process.Kill(); cmd.Wait() }
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(fmt.Errorf("redis-server did not answer"))
	return "", nil
}

// run calls op from `goroutines` goroutines for `duration`; returns ops/s.
func run(op func(worker, i int) error) float64 {
	var total atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < goroutines; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for ; time.Now().Before(deadline); n++ {
				if err := op(w, n); err != nil {
					failed.Store(err)
					return
				}
			}
			total.Add(int64(n))
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		must(err)
	}
	return float64(total.Load()) / time.Since(start).Seconds()
}

func median(xs []float64) float64 {
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2]
}

func key(w, i int) string { return fmt.Sprintf("user:%d", (w*7919+i)%keys) }

func decisions(addr string) {
	ctx := context.Background()
	l, err := polylimit.New(polylimit.Options{
		Policy: &polylimit.Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000},
		Store:  "redis://" + addr, Prefix: "bench-polylimit", Timeout: time.Second,
	})
	must(err)
	defer l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	peer := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1000000, Burst: 1000000, Period: time.Second}

	// Rounds alternate the two, so background load on this shared machine
	// hits both alike; medians are reported.
	var oursRuns, theirsRuns []float64
	for round := 0; round < rounds; round++ {
		oursRuns = append(oursRuns, run(func(w, i int) error {
			d, err := l.Check(ctx, key(w, i))
			if err == nil && d.Source != polylimit.SourceStore {
				err = fmt.Errorf("decided by %s, not Redis", d.Source)
			}
			return err
		}))
		theirsRuns = append(theirsRuns, run(func(w, i int) error {
			_, err := peer.Allow(ctx, "bench-rr:"+key(w, i), limit)
			return err
		}))
	}
	ours, theirs := median(oursRuns), median(theirsRuns)
	mem, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000}})
	must(err)
	defer mem.Close()
	memory := run(func(w, i int) error { _, err := mem.Check(ctx, key(w, i)); return err })

	fmt.Printf("decisions/s, %d goroutines, one redis-server on loopback, %d keys, median of %d alternating %s runs\n", goroutines, keys, rounds, duration)
	fmt.Printf("  polylimit gcra (redis)          %10.0f\n", ours)
	fmt.Printf("  go-redis/redis_rate GCRA        %10.0f\n", theirs)
	fmt.Printf("  ratio polylimit / redis_rate    %10.2fx\n", ours/theirs)
	fmt.Printf("  polylimit gcra (memory store)   %10.0f\n", memory)
}

func requests(name string, handler http.Handler) float64 {
	srv := httptest.NewServer(handler)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: goroutines, MaxConnsPerHost: goroutines}}
	defer client.CloseIdleConnections()
	return run(func(w, i int) error {
		res, err := client.Get(srv.URL + "/api/x")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("%s: status %d", name, res.StatusCode)
		}
		return nil
	})
}

func middleware(addr string) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	limited := func(store string) http.Handler {
		l, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "1000000/s", Burst: 1000000},
			Store: store, Prefix: "bench-http", Timeout: time.Second})
		must(err)
		return l.Middleware()(ok)
	}
	plain := requests("unlimited", ok)
	memory := requests("memory", limited("memory"))
	onRedis := requests("redis", limited("redis://"+addr))
	fmt.Printf("net/http requests/s, %d concurrent keep-alive clients on loopback, %s each\n", goroutines, duration)
	fmt.Printf("  unlimited handler               %10.0f\n", plain)
	fmt.Printf("  polylimit middleware, memory    %10.0f  (%.2fx of unlimited)\n", memory, memory/plain)
	fmt.Printf("  polylimit middleware, redis     %10.0f  (%.2fx of unlimited)\n", onRedis, onRedis/plain)
}

func main() {
	addr, stop := startRedis()
	defer stop()
	decisions(addr)
	middleware(addr)
}
