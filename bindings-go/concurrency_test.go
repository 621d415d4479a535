package polylimit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func osThreads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// load runs `goroutines` goroutines doing `each` checks on Redis and reports
// the process's peak OS thread count and decisions/s.
func load(t *testing.T, goroutines, each int, check func(key string) (Decision, error)) (peak int, perSecond float64) {
	var stop atomic.Bool
	var peakThreads atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for !stop.Load() {
			if n := int64(osThreads()); n > peakThreads.Load() {
				peakThreads.Store(n)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("user:%d", g)
			for i := 0; i < each; i++ {
				if d, err := check(key); err != nil || d.Source != SourceStore {
					failures.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop.Store(true)
	<-sampled
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d checks failed or were not decided by Redis", f)
	}
	return int(peakThreads.Load()), float64(goroutines*each) / elapsed.Seconds()
}

// 1,000 goroutines checking on Redis at once must not need an OS thread per
// in-flight round trip: the completion queue parks goroutines on channels.
func TestThousandGoroutinesDoNotNeedAThreadEach(t *testing.T) {
	redis := startRedis(t)
	l := newLimiter(t, Options{Policy: &Policy{Algorithm: "gcra", Rate: "1000000/s"}, Store: redis.url(),
		Prefix: "go-threads"})
	ctx := context.Background()
	if _, err := l.Check(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	base := osThreads()
	asyncPeak, asyncRate := load(t, 1000, 20, func(k string) (Decision, error) { return l.Check(ctx, k) })
	blockingPeak, blockingRate := load(t, 1000, 20, l.checkBlocking)
	t.Logf("1000 goroutines x 20 checks on Redis: completion-queue path peak %d OS threads (%d before), %.0f decisions/s; "+
		"blocking cgo call peak %d threads, %.0f decisions/s", asyncPeak, base, asyncRate, blockingPeak, blockingRate)
	// Not one thread per in-flight call: a few for the runtime, plus what a
	// loaded machine makes Go's scheduler add around short cgo calls.
	if asyncPeak > base+200 {
		t.Fatalf("the completion-queue path grew from %d to %d OS threads", base, asyncPeak)
	}
}
