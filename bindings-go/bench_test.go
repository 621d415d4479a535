package polylimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The middleware's own cost per request, without a network: compare with
// BenchmarkHandlerAlone (go test -bench . -run ^$). Each also reports
// cpu-ns/op, the process's CPU time per request, which other processes on a
// loaded machine change less than the wall time of ns/op.
func BenchmarkMiddlewareMemory(b *testing.B) {
	l, err := New(Options{Policy: &Policy{Name: "api", Rate: "1000000000/s", Burst: 1000000000}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	benchHandler(b, l.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
}

// BenchmarkMiddlewareMemory with the headers a browser sends (none of
// which the rules read): what passing a request's headers to the core costs.
func BenchmarkMiddlewareMemoryBrowserHeaders(b *testing.B) {
	l, err := New(Options{Policy: &Policy{Name: "api", Rate: "1000000000/s", Burst: 1000000000}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	benchHandlerWith(b, l.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })),
		browserHeaders)
}

// The headers of a browser's GET (Chrome's, shortened values).
var browserHeaders = [][2]string{
	{"User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"},
	{"Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"},
	{"Accept-Encoding", "gzip, deflate, br"},
	{"Accept-Language", "en-US,en;q=0.9"},
	{"Cache-Control", "max-age=0"},
	{"Connection", "keep-alive"},
	{"Cookie", "session=0123456789abcdef0123456789abcdef; theme=dark"},
	{"Sec-Ch-Ua", `"Chromium";v="120", "Not?A_Brand";v="8"`},
	{"Sec-Ch-Ua-Mobile", "?0"},
	{"Sec-Ch-Ua-Platform", `"Linux"`},
	{"Sec-Fetch-Dest", "document"},
	{"Sec-Fetch-Mode", "navigate"},
	{"Sec-Fetch-Site", "none"},
	{"Upgrade-Insecure-Requests", "1"},
}

func BenchmarkHandlerAlone(b *testing.B) {
	benchHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
}

func benchHandler(b *testing.B, h http.Handler) {
	benchHandlerWith(b, h, [][2]string{{"User-Agent", "Go-http-client/1.1"}, {"Accept-Encoding", "gzip"}})
}

func benchHandlerWith(b *testing.B, h http.Handler, headers [][2]string) {
	req := httptest.NewRequest("GET", "http://example.com/api/x", nil)
	req.RemoteAddr = "203.0.113.7:5555"
	for _, kv := range headers {
		req.Header.Set(kv[0], kv[1])
	}
	b.ReportAllocs()
	b.ResetTimer()
	started := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-started)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time this process used so far (every thread, user and system).
func cpuTime() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// An Acquire and its Release on a real Redis, from 16 goroutines per
// processor (each on its own key): both wait for the store, so both come
// through the completion queue.
func BenchmarkRedisAcquireRelease(b *testing.B) {
	l, err := New(Options{Policy: &Policy{Algorithm: "concurrency", Limit: 100000}, Store: startRedis(b).url(),
		Timeout: 5 * time.Second, Prefix: "go-bench-lease"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var workers atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	started := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("k", workers.Add(1))
		for pb.Next() {
			d, lease, err := l.Acquire(ctx, key)
			if err != nil || !d.Allowed || d.Source != SourceStore {
				b.Fatalf("%+v %v", d, err)
			}
			if n, err := lease.Release(ctx); n != 1 || err != nil {
				b.Fatalf("release: %d %v", n, err)
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-started)/float64(b.N), "cpu-ns/op")
}

// What the thread hops of a Redis check cost at one call in flight (issue
// 34): p50 and p99 of Check through the completion bridge (the goroutine
// parks; the core's runtime thread does the Redis I/O and wakes Go through
// the bridge's pipe), of checkBlocking (the calling thread blocks in the
// core until the runtime answers: no pipe, no Go scheduling), of a memory
// Check (no hop, no I/O), and of a Redis round trip made by Go itself on
// one connection (PING, and an EVAL of a one-key script): the floor a Go
// Redis client pays. go test -bench RedisLatency -run ^$ -benchtime 20000x
func BenchmarkRedisLatency(b *testing.B) {
	redis := startRedis(b)
	l, err := New(Options{Policy: &Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000}, Store: redis.url(),
		Timeout: time.Second, Prefix: "go-bench-latency"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	mem, err := New(Options{Policy: &Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000}})
	if err != nil {
		b.Fatal(err)
	}
	defer mem.Close()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", redis.port))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	in := bufio.NewReader(conn)
	roundTrip := func(cmd string) error {
		if _, err := io.WriteString(conn, cmd); err != nil {
			return err
		}
		_, err := in.ReadString('\n')
		return err
	}
	ctx := context.Background()
	script := "*5\r\n$4\r\nEVAL\r\n$60\r\n" + fmt.Sprintf("%-60s", "return redis.call('INCR', KEYS[1]) + tonumber(ARGV[1])") +
		"\r\n$1\r\n1\r\n$7\r\nbench:k\r\n$1\r\n1\r\n"
	for _, c := range []struct {
		name string
		op   func(i int) error
	}{
		{"ping", func(int) error { return roundTrip("*1\r\n$4\r\nPING\r\n") }},
		{"eval", func(int) error { return roundTrip(script) }},
		{"memory", func(i int) error { _, err := mem.Check(ctx, fmt.Sprint("k", i%1000)); return err }},
		{"bridge", func(i int) error {
			d, err := l.Check(ctx, fmt.Sprint("k", i%1000))
			if err == nil && d.Source != SourceStore {
				err = fmt.Errorf("decided by %s", d.Source)
			}
			return err
		}},
		{"blocking", func(i int) error { _, err := l.checkBlocking(fmt.Sprint("k", i%1000)); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := range 200 {
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
			times := make([]time.Duration, b.N)
			b.ResetTimer()
			started := cpuTime()
			for i := range b.N {
				t := time.Now()
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
				times[i] = time.Since(t)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-started)/float64(b.N), "cpu-ns/op")
			slices.Sort(times)
			b.ReportMetric(float64(times[b.N/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(times[b.N*99/100].Microseconds()), "p99-µs")
		})
	}
}
