// Command bench prints polylimit's Go throughput next to named peers measured
// in the same run (`make go-bench`), medians of alternating rounds:
//   - decisions/s with 64 goroutines on one real Redis: polylimit (gcra) vs
//     github.com/go-redis/redis_rate (GCRA over go-redis);
//   - net/http requests/s through polylimit's middleware (memory store and
//     Redis) and github.com/ulule/limiter's (Redis), each as a fraction of the
//     same handler unlimited;
//   - the latency (p50/p99/p99.9) of one check on Redis at 1, 32 and 256
//     concurrent goroutines, polylimit vs redis_rate.
//
// Profiling: -handlers picks the middleware part's handlers, -threads prints
// each run's CPU per request by thread name and context switches,
// -cpuprofile writes a pprof profile. The Go binding's results come through
// the core's completion bridge.
//
// With POLYLIMIT_BENCH_OUT set, every result line is also appended to that
// file as one JSON object (bench/report.py reads them). -only runs some parts.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/internal/sansio"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

const (
	goroutines = 64
	keys       = 1000
	duration   = 2 * time.Second
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
				redisPid = cmd.Process.Pid
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
	lastOps = total.Load()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// lastOps is how many operations the last run did.
var lastOps int64

// measured is run(op) with the CPU each operation cost.
func measured(op func(worker, i int) error) (float64, cpuUse) {
	used := startCPU()
	rate := run(op)
	return rate, used.stop(lastOps)
}

func median(xs []float64) float64 {
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2]
}

func key(w, i int) string { return fmt.Sprintf("user:%d", (w*7919+i)%keys) }

// A result line, as bench/report.py reads it.
type line struct {
	Suite         string            `json:"suite"`
	What          string            `json:"what"`
	Value         float64           `json:"value"`
	Unit          string            `json:"unit"`
	Baseline      string            `json:"baseline,omitempty"`
	BaselineValue *float64          `json:"baseline_value,omitempty"`
	Ratio         *float64          `json:"ratio,omitempty"`
	Target        *float64          `json:"target,omitempty"`
	Peers         map[string]string `json:"peers,omitempty"`
	// What bounds the line on this machine, measured (CPU per request of each process).
	Bound string `json:"bound,omitempty"`
}

// against sets the line's baseline and ratio (value / baseline). A baseline
// that was not run (-handlers left it out: zero) gives no ratio.
func (l line) against(name string, value float64) line {
	l.Baseline = name
	if value > 0 {
		ratio := l.Value / value
		l.BaselineValue, l.Ratio = &value, &ratio
	}
	return l
}

// atLeast sets the line's target: a minimum ratio.
func (l line) atLeast(target float64) line {
	l.Target = &target
	return l
}

func (l line) with(peers ...string) line {
	l.Peers = map[string]string{}
	for _, p := range peers {
		l.Peers[p] = version(p)
	}
	return l
}

// text is l as printed: value, ratio and target, or why there is no ratio.
func (l line) text() string {
	text := fmt.Sprintf("  %-64s %10.0f %s", l.What, l.Value, l.Unit)
	if l.Unit == "ms" {
		text = fmt.Sprintf("  %-64s %10.3f %s", l.What, l.Value, l.Unit)
	}
	switch {
	case l.Ratio != nil:
		text += fmt.Sprintf("  %.2fx %s", *l.Ratio, l.Baseline)
	case l.Baseline != "":
		return text + fmt.Sprintf("  (no ratio: %s not run)", l.Baseline)
	}
	if l.Target != nil {
		met := "met"
		if *l.Ratio < *l.Target {
			met = "NOT met"
		}
		text += fmt.Sprintf(" (target >= %g: %s)", *l.Target, met)
	}
	return text
}

// record prints l and appends it to $POLYLIMIT_BENCH_OUT when set.
func record(l line) {
	fmt.Println(l.text())
	if l.Bound != "" {
		fmt.Println("    " + l.Bound)
	}
	path := os.Getenv("POLYLIMIT_BENCH_OUT")
	if path == "" || *handlerList != "" {
		// A run of some handlers only is not a result (its other lines are zeros).
		return
	}
	l.Suite = "go"
	data, err := json.Marshal(l)
	must(err)
	must(os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	must(err)
	_, err = f.Write(append(data, '\n'))
	must(err)
	must(f.Close())
}

// version is the version of a module this binary was built with.
func version(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				if m.Replace != nil && m.Replace.Version != "" {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "unknown"
}

const (
	redisRate  = "github.com/go-redis/redis_rate/v10"
	goRedis    = "github.com/redis/go-redis/v9"
	ululeLimit = "github.com/ulule/limiter/v3"
)

// gcraLimiters is polylimit (gcra on Redis) and redis_rate, alike: one
// million per second, a burst of one million.
func gcraLimiters(addr string) (ours func(ctx context.Context, key string) error, theirs func(ctx context.Context, key string) error, close func()) {
	l, err := polylimit.New(polylimit.Options{
		Policy: &polylimit.Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000},
		Store:  "redis://" + addr, Prefix: "bench-polylimit", Timeout: time.Second,
	})
	must(err)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	peer := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1000000, Burst: 1000000, Period: time.Second}
	ours = func(ctx context.Context, key string) error {
		d, err := l.Check(ctx, key)
		if err == nil && d.Source != polylimit.SourceStore {
			err = fmt.Errorf("decided by %s, not Redis", d.Source)
		}
		return err
	}
	theirs = func(ctx context.Context, key string) error {
		_, err := peer.Allow(ctx, "bench-rr:"+key, limit)
		return err
	}
	return ours, theirs, func() { l.Close(); rdb.Close() }
}

func decisions(addr string) {
	ctx := context.Background()
	ours, theirs, closeAll := gcraLimiters(addr)
	defer closeAll()

	// Rounds alternate the two, so background load on this shared machine
	// hits both alike; medians are reported.
	var oursRuns, theirsRuns, offRuns []float64
	var oursCPU, theirsCPU, offCPU []cpuUse
	for round := 0; round < rounds; round++ {
		rate, used := measured(func(w, i int) error { return ours(ctx, key(w, i)) })
		oursRuns, oursCPU = append(oursRuns, rate), append(oursCPU, used)
		// The same without the sans-I/O path (sansio.go: it carries a lone check only).
		sansio.Off.Store(true)
		rate, used = measured(func(w, i int) error { return ours(ctx, key(w, i)) })
		sansio.Off.Store(false)
		offRuns, offCPU = append(offRuns, rate), append(offCPU, used)
		rate, used = measured(func(w, i int) error { return theirs(ctx, key(w, i)) })
		theirsRuns, theirsCPU = append(theirsRuns, rate), append(theirsCPU, used)
	}
	mem, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Algorithm: "gcra", Rate: "1000000/s", Burst: 1000000}})
	must(err)
	defer mem.Close()
	memory := run(func(w, i int) error { _, err := mem.Check(ctx, key(w, i)); return err })

	fmt.Printf("decisions/s, %d goroutines, one redis-server on loopback, %d keys, median of %d alternating %s runs\n", goroutines, keys, rounds, duration)
	fmt.Printf("  (%s %s, %s %s)\n", redisRate, version(redisRate), goRedis, version(goRedis))
	fmt.Printf("  each round (decisions/s): polylimit %.0f, sans-I/O off %.0f, redis_rate %.0f\n", oursRuns, offRuns, theirsRuns)
	theirsMedian := median(theirsRuns)
	record(line{What: "go-redis/redis_rate GCRA Allow(), redis", Value: theirsMedian, Unit: "decisions/s"}.with(redisRate, goRedis))
	gcraLine := line{What: "gcra check(), redis, 64 goroutines", Value: median(oursRuns), Unit: "decisions/s"}.
		against("go-redis/redis_rate", theirsMedian).atLeast(1.2).with(redisRate, goRedis)
	o, t := medianCPU(oursCPU), medianCPU(theirsCPU)
	gcraLine.Bound = fmt.Sprintf("CPU per decision: polylimit %.1f µs + redis-server %.1f µs; redis_rate %.1f µs + redis-server %.1f µs; the machine %.2f of %d cores busy",
		o.process, o.redis, t.process, t.redis, o.busy, runtime.NumCPU())
	record(gcraLine)
	off := medianCPU(offCPU)
	offLine := line{What: "gcra check(), redis, 64 goroutines, sans-I/O off", Value: median(offRuns), Unit: "decisions/s"}.
		against("go-redis/redis_rate", theirsMedian).with(redisRate, goRedis)
	offLine.Bound = fmt.Sprintf("CPU per decision: polylimit %.1f µs + redis-server %.1f µs", off.process, off.redis)
	record(offLine)
	record(line{What: "gcra check(), memory store, 64 goroutines", Value: memory, Unit: "decisions/s"})
}

// requests runs `handler` under `goroutines` keep-alive clients of this process
// (rawClient: they parse no headers, as wrk does); returns requests/s and the
// CPU each request cost.
func requests(name string, handler http.Handler) (float64, cpuUse) {
	srv := httptest.NewServer(handler)
	defer srv.Close()
	clients := make([]*rawClient, goroutines)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	addr := srv.Listener.Addr().String()
	var n atomic.Int64
	used := startCPU()
	rate := run(func(w, i int) error {
		n.Add(1)
		if clients[w] == nil {
			c, err := dialRaw(addr, "/api/x")
			if err != nil {
				return err
			}
			clients[w] = c
		}
		status, err := clients[w].get()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if status != 200 {
			return fmt.Errorf("%s: status %d", name, status)
		}
		return nil
	})
	lastRequests = n.Load()
	return rate, used.stop(n.Load())
}

// lastRequests is the number of requests of the last run (for -threads).
var lastRequests int64

func middleware(addr string) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	limited := func(store string) http.Handler {
		l, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "1000000/s", Burst: 1000000},
			Store: store, Prefix: "bench-http", Timeout: time.Second})
		must(err)
		return l.Middleware()(ok)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	store, err := ululeredis.NewStoreWithOptions(rdb, ulule.StoreOptions{Prefix: "bench-ulule"})
	must(err)
	peer := ululehttp.NewMiddleware(ulule.New(store, ulule.Rate{Period: time.Second, Limit: 1000000})).Handler(ok)

	// The same handler writing, with no limiter, the headers the middleware
	// sets on an allowed request: what those headers alone cost on the wire
	// (the server formats and writes them; the clients skip them).
	sample := httptest.NewRecorder()
	limited("memory").ServeHTTP(sample, httptest.NewRequest("GET", "/api/x", nil))
	rateHeaders := http.Header{}
	for name, values := range sample.Header() {
		if name != "Content-Type" {
			rateHeaders[name] = values
		}
	}
	withHeaders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for name, values := range rateHeaders {
			h[name] = values
		}
		io.WriteString(w, "ok")
	})

	// -handlers floor only: the cheapest limiter this bench can think of, in
	// Go, in the handler: a token bucket per client IP under one mutex, then
	// the same header names with values formatted per request. What any
	// limiter that sets those headers costs at least (not a peer: it has no
	// rules, no fallback, no metrics).
	var floorMu sync.Mutex
	type bucket struct {
		tokens float64
		at     time.Time
	}
	floorBuckets := map[string]*bucket{}
	floorNames := make([]string, 0, len(rateHeaders))
	for name := range rateHeaders {
		floorNames = append(floorNames, name)
	}
	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		now := time.Now()
		floorMu.Lock()
		b := floorBuckets[ip]
		if b == nil {
			b = &bucket{tokens: 1000000, at: now}
			floorBuckets[ip] = b
		}
		b.tokens = min(1000000, b.tokens+now.Sub(b.at).Seconds()*1000000)
		b.at = now
		allowed := b.tokens >= 1
		if allowed {
			b.tokens--
		}
		remaining := int64(b.tokens)
		floorMu.Unlock()
		if !allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		h := w.Header()
		values := make([]string, len(floorNames))
		for i, name := range floorNames {
			values[i] = strconv.FormatInt(remaining+int64(i), 10)
			h[name] = values[i : i+1 : i+1]
		}
		io.WriteString(w, "ok")
	})

	onRedisHandler := limited("redis://" + addr)
	// The same on two pipelined connections (only with -handlers ...,redis-2conns).
	sansio.Conns.Store(2)
	onRedis2Conns := limited("redis://" + addr)
	sansio.Conns.Store(0)
	handlers := []struct {
		name    string
		handler http.Handler
		runs    []float64
		cpus    []cpuUse
		usual   bool // the requests' sans-I/O path off (sansio.RequestsOff)
	}{
		{name: "unlimited", handler: ok},
		{name: "memory", handler: limited("memory")},
		{name: "redis", handler: onRedisHandler},
		{name: "ulule", handler: peer},
		{name: "headers", handler: withHeaders},
		{name: "floor", handler: floor},
		{name: "redis-usual", handler: onRedisHandler, usual: true},
		{name: "redis-2conns", handler: onRedis2Conns},
	}
	for round := 0; round < rounds; round++ {
		for i := range handlers {
			h := &handlers[i]
			if !wanted(h.name) || ((h.name == "floor" || h.name == "redis-usual" || h.name == "redis-2conns") && *handlerList == "") {
				// -handlers left it out: a zero line, not a measurement.
				h.runs, h.cpus = append(h.runs, 0), append(h.cpus, cpuUse{})
				continue
			}
			threads := startThreads()
			sansio.RequestsOff.Store(h.usual)
			carried := sansio.Carried.Load()
			rate, used := requests(h.name, h.handler)
			sansio.RequestsOff.Store(false)
			if *showRounds {
				fmt.Printf("  round %d %-12s %9.0f req/s  CPU/request: process %.1f µs, redis-server %.1f µs; sans-I/O carried %d of %d\n",
					round, h.name, rate, used.process, used.redis, sansio.Carried.Load()-carried, lastRequests)
			}
			if *showThreads {
				threads.print(h.name)
			}
			h.runs = append(h.runs, rate)
			h.cpus = append(h.cpus, used)
		}
	}
	plain, memory, onRedis, theirs := median(handlers[0].runs), median(handlers[1].runs), median(handlers[2].runs), median(handlers[3].runs)
	fmt.Printf("net/http requests/s, %d concurrent keep-alive clients on loopback, median of %d alternating %s runs\n", goroutines, rounds, duration)
	fmt.Printf("  (%s %s with its redis store, on %s %s)\n", ululeLimit, version(ululeLimit), goRedis, version(goRedis))
	record(line{What: "net/http handler, no limiter", Value: plain, Unit: "req/s"})
	// What bounds the ratios on this machine: the CPU per request of this process (the server
	// and its load-generating clients) and of redis-server, medians over rounds.
	cpuOf := make([]cpuUse, len(handlers))
	for i := range handlers {
		cpuOf[i] = medianCPU(handlers[i].cpus)
	}
	// With every core busy, req/s goes as 1 / CPU per request: the ratio the CPU allows.
	memoryBound := fmt.Sprintf("CPU per request, server and its raw clients in one process: polylimit on memory %.1f µs, "+
		"no limiter %.1f µs, no limiter writing the same headers %.1f µs (CPU ratios %.2f and %.2f: the headers alone cost %.1f µs); "+
		"the machine %.2f of %d cores busy",
		cpuOf[1].process, cpuOf[0].process, cpuOf[4].process, cpuOf[0].process/cpuOf[1].process, cpuOf[0].process/cpuOf[4].process,
		cpuOf[4].process-cpuOf[0].process, cpuOf[1].busy, runtime.NumCPU())
	redisBound := fmt.Sprintf("CPU per request: polylimit %.1f µs + redis-server %.1f µs; ulule/limiter %.1f µs + redis-server %.1f µs; "+
		"no limiter %.1f µs; the machine %.2f of %d cores busy",
		cpuOf[2].process, cpuOf[2].redis, cpuOf[3].process, cpuOf[3].redis, cpuOf[0].process, cpuOf[2].busy, runtime.NumCPU())
	memoryLine := line{What: "net/http polylimit middleware, memory store", Value: memory, Unit: "req/s"}.
		against("no limiter", plain).atLeast(0.9)
	memoryLine.Bound = memoryBound
	record(memoryLine)
	headers := median(handlers[4].runs)
	record(line{What: fmt.Sprintf("net/http handler writing the %d rate-limit headers, no limiter", len(rateHeaders)), Value: headers, Unit: "req/s"}.
		against("no limiter", plain))
	record(line{What: "net/http polylimit middleware, memory store, vs the same headers", Value: memory, Unit: "req/s"}.
		against("headers, no limiter", headers))
	if floorRate := median(handlers[5].runs); floorRate > 0 {
		floorLine := line{What: "net/http Go token bucket in the handler + the same headers (a floor)", Value: floorRate, Unit: "req/s"}.
			against("no limiter", plain)
		floorLine.Bound = fmt.Sprintf("CPU per request %.1f µs (no limiter %.1f µs, polylimit on memory %.1f µs)",
			cpuOf[5].process, cpuOf[0].process, cpuOf[1].process)
		record(floorLine)
	}
	redisLine := line{What: "net/http polylimit middleware, redis", Value: onRedis, Unit: "req/s"}.
		against("no limiter", plain).atLeast(0.5)
	redisLine.Bound = redisBound
	record(redisLine)
	record(line{What: "net/http ulule/limiter middleware, redis", Value: theirs, Unit: "req/s"}.
		against("no limiter", plain).with(ululeLimit, goRedis))
	record(line{What: "net/http polylimit vs ulule/limiter, redis", Value: onRedis, Unit: "req/s"}.
		against("ulule/limiter", theirs).with(ululeLimit, goRedis))
	if usual := median(handlers[6].runs); usual > 0 {
		u := medianCPU(handlers[6].cpus)
		usualLine := line{What: "net/http polylimit middleware, redis, requests' sans-I/O off", Value: usual, Unit: "req/s"}.
			against("ulule/limiter", theirs).with(ululeLimit, goRedis)
		usualLine.Bound = fmt.Sprintf("CPU per request: polylimit %.1f µs + redis-server %.1f µs", u.process, u.redis)
		record(usualLine)
	}
	if two := median(handlers[7].runs); two > 0 {
		u := medianCPU(handlers[7].cpus)
		twoLine := line{What: "net/http polylimit middleware, redis, two pipelined connections", Value: two, Unit: "req/s"}.
			against("ulule/limiter", theirs).with(ululeLimit, goRedis)
		twoLine.Bound = fmt.Sprintf("CPU per request: polylimit %.1f µs + redis-server %.1f µs", u.process, u.redis)
		record(twoLine)
	}
}

// latencies calls op from c goroutines for d; returns each call's time.
func latencies(c int, d time.Duration, op func(w, i int) error) []time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	var failed atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			for i := 0; time.Now().Before(deadline); i++ {
				start := time.Now()
				if err := op(w, i); err != nil {
					failed.Store(err)
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		must(err)
	}
	return all
}

func percentile(sorted []time.Duration, p float64) float64 {
	i := int(p * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / float64(time.Millisecond)
}

// latencyRounds: the latency part's alternating rounds (-latency-rounds).
var latencyRounds = flag.Int("latency-rounds", rounds, "latency part: alternating rounds of 1s per concurrency")

// arm is one side of the latency part's A/B: its calls' times over every
// round, and each round's p50/p99 and CPU per decision.
type arm struct {
	name   string
	op     func(ctx context.Context, key string) error
	off    bool // the sans-I/O path off: the usual one (the core's runtime thread carries the call)
	all    []time.Duration
	rounds []string
	cpus   []cpuUse
}

func (a *arm) run(ctx context.Context, c int) {
	sansio.Off.Store(a.off)
	defer sansio.Off.Store(false)
	carried := sansio.Carried.Load()
	used := startCPU()
	times := latencies(c, time.Second, func(w, i int) error { return a.op(ctx, key(w, i)) })
	cpu := used.stop(int64(len(times)))
	carried = sansio.Carried.Load() - carried
	a.all = append(a.all, times...)
	a.cpus = append(a.cpus, cpu)
	slices.Sort(times)
	a.rounds = append(a.rounds, fmt.Sprintf("%.3f/%.3f (%.1f+%.1f µs, %.0f%% sans-I/O)", percentile(times, 0.5), percentile(times, 0.99),
		cpu.process, cpu.redis, 100*float64(carried)/float64(max(len(times), 1))))
}

func latency(addr string) {
	ctx := context.Background()
	ours, theirs, closeAll := gcraLimiters(addr)
	defer closeAll()
	fmt.Printf("latency of one check on Redis, ms, %d alternating rounds of 1s per concurrency\n", *latencyRounds)
	fmt.Println("  each round: p50/p99 ms (CPU per decision: this process + redis-server, µs; share of checks the sans-I/O connection carried)")
	for _, c := range []int{1, 32, 256} {
		arms := []*arm{{name: "polylimit check()", op: ours}, {name: "polylimit check(), usual path", op: ours, off: true},
			{name: "go-redis/redis_rate Allow()", op: theirs}}
		for round := 0; round < *latencyRounds; round++ {
			// Each round starts with another arm: the one after the peer's (go-redis's
			// garbage) is not always the same.
			for i := range arms {
				arms[(round+i)%len(arms)].run(ctx, c)
			}
		}
		for _, a := range arms {
			cpu := medianCPU(a.cpus)
			fmt.Printf("  %s, %d concurrent: %s; median CPU %.1f+%.1f µs\n", a.name, c, strings.Join(a.rounds, ", "), cpu.process, cpu.redis)
			slices.Sort(a.all)
		}
		mine, before, peers := arms[0].all, arms[1].all, arms[2].all
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50", 0.5}, {"p99", 0.99}, {"p99.9", 0.999}} {
			theirs := percentile(peers, p.q)
			record(line{What: fmt.Sprintf("go-redis/redis_rate Allow() latency %s, %d concurrent", p.name, c), Value: theirs, Unit: "ms"}.
				with(redisRate, goRedis))
			record(line{What: fmt.Sprintf("gcra check() latency %s, %d concurrent", p.name, c), Value: percentile(mine, p.q), Unit: "ms"}.
				against("go-redis/redis_rate", theirs).with(redisRate, goRedis))
			record(line{What: fmt.Sprintf("gcra check() latency %s, %d concurrent, sans-I/O off", p.name, c), Value: percentile(before, p.q), Unit: "ms"}.
				against("go-redis/redis_rate", theirs).with(redisRate, goRedis))
		}
	}
}

// -handlers: the middleware part's handlers to run (default all); -threads
// prints each run's CPU by thread name; -cpuprofile writes a pprof profile.
var (
	handlerList = flag.String("handlers", "", "middleware part: the handlers to run, comma-separated (unlimited,memory,redis,ulule,headers,floor,redis-usual,redis-2conns); default all but floor, redis-usual (the redis handler with the requests' sans-I/O path off) and redis-2conns (on two pipelined connections)")
	showRounds  = flag.Bool("rounds", false, "middleware part: print each round's req/s and CPU per request")
	showThreads = flag.Bool("threads", false, "print each middleware run's CPU per request by thread name (/proc/self/task)")
	cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
)

func wanted(name string) bool {
	return *handlerList == "" || slices.Contains(strings.Split(*handlerList, ","), name)
}

func main() {
	only := flag.String("only", "decisions,middleware,latency", "the parts to run, comma-separated")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	addr, stop := startRedis()
	defer stop()
	parts := map[string]func(string){"decisions": decisions, "middleware": middleware, "latency": latency}
	for _, part := range strings.Split(*only, ",") {
		f, ok := parts[part]
		if !ok {
			must(fmt.Errorf("-only: unknown part %q (decisions, middleware, latency)", part))
		}
		f(addr)
	}
}
