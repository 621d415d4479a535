package polylimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

func BenchmarkHandlerAlone(b *testing.B) {
	benchHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
}

func benchHandler(b *testing.B, h http.Handler) {
	req := httptest.NewRequest("GET", "http://example.com/api/x", nil)
	req.RemoteAddr = "203.0.113.7:5555"
	req.Header.Set("User-Agent", "Go-http-client/1.1")
	req.Header.Set("Accept-Encoding", "gzip")
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
