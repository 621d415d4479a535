// The gateway benchmark: envoyproxy/ratelimit (built from its Go module) and
// polylimit-server (release build) side by side on one redis-server, the same
// fixed window on both, gRPC ShouldRateLimit load from this process at 1, 32
// and 256 calls in flight. Prints decisions/s, p50/p99 and the CPU per
// decision of the server, redis-server and this load generator (from /proc),
// the rounds of the two alternating so both see the same machine; appends the
// lines to $POLYLIMIT_BENCH_OUT for bench/report.py.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/polylimit/polylimit/tests/gateway/harness"
)

const (
	domain     = "polylimit"
	peerName   = "envoyproxy/ratelimit"
	ourName    = "polylimit-server"
	throughput = 1.5 // the target: at least this many times the peer's decisions/s
)

// One limit both understand: a fixed window per user, far above the load, so
// every call is decided by Redis and admitted.
const peerConfig = `domain: polylimit
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
`

func ourRules(redis string) string {
	return fmt.Sprintf(`store: %s
prefix: gwbench
timeout: 10s   # decided by Redis at any load, never by the local fallback
policies:
  bench: { algorithm: fixed_window, rate: 1000000000/min }
rules:
  - { match: { path: "/*" }, key: [user], policy: bench }
`, redis)
}

var (
	seconds = flag.Float64("seconds", 5, "measured seconds per round")
	rounds  = flag.Int("rounds", 3, "rounds per level (the median is printed)")
	levels  = flag.String("levels", "1,32,256", "calls in flight")
	keys    = flag.Int("keys", 1000, "distinct users")
	conns   = flag.Int("conns", 4, "gRPC connections per target (Envoy opens one per worker)")
)

// target is one rate-limit service under load.
type target struct {
	name, version string
	pid           int
	clients       []*harness.Client
}

// round is one measured run of a target at one level.
type round struct {
	rate, p50, p99      float64 // decisions/s, ms
	cpuServer, cpuRedis float64 // µs per decision
	cpuLoad             float64
	overLimit, failed   int64
}

func main() {
	flag.Parse()
	if err := bench(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway bench:", err)
		os.Exit(1)
	}
}

// bench runs everything; the deferred stops end every process it started.
func bench() error {
	redis, err := harness.StartRedis()
	if err != nil {
		return err
	}
	defer redis.Kill()
	dir, err := os.MkdirTemp("", "polylimit-gwbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	peer, err := harness.StartPeer(harness.PeerBinary(), peerConfig, dir, redis)
	if err != nil {
		return err
	}
	defer peer.Kill()
	rules := filepath.Join(dir, "polylimit.yaml")
	if err := os.WriteFile(rules, []byte(ourRules(redis.URL())), 0o644); err != nil {
		return err
	}
	binary := harness.ServerBinary("release")
	server, err := harness.StartServer(harness.ServerOptions{Binary: binary, Rules: rules})
	if err != nil {
		return err
	}
	defer server.Stop()

	targets := []*target{
		{name: peerName, version: peer.Version, pid: peer.Pid()},
		{name: ourName, pid: server.Pid()},
	}
	for _, t := range targets {
		addr := peer.Grpc
		if t.name == ourName {
			addr = server.Grpc
		}
		for i := 0; i < *conns; i++ {
			c, err := harness.Dial(addr)
			if err != nil {
				return err
			}
			defer c.Close()
			t.clients = append(t.clients, c)
		}
	}
	fmt.Printf("gateway: %s %s and %s (%s) on one redis-server, fixed window per user over %d users, %d gRPC connections each, %d × %g s per level\n",
		peerName, peer.Version, ourName, binary, *keys, *conns, *rounds, *seconds)

	for _, field := range strings.Split(*levels, ",") {
		level, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil {
			return fmt.Errorf("-levels: %w", err)
		}
		results := map[string][]round{}
		for r := 0; r < *rounds; r++ {
			order := targets
			if r%2 == 1 {
				order = []*target{targets[1], targets[0]}
			}
			for _, t := range order {
				run(t, level, redis.Pid(), 500*time.Millisecond) // warm up: connections, caches
				results[t.name] = append(results[t.name], run(t, level, redis.Pid(), time.Duration(*seconds*float64(time.Second))))
			}
		}
		if err := report(level, peer.Version, median(results[peerName]), median(results[ourName]), results); err != nil {
			return err
		}
	}
	if text, err := server.Metrics(); err == nil && !strings.Contains(text, "polylimit_store_errors_total 0\n") {
		return fmt.Errorf("polylimit-server's store calls failed (decided by the fallback): %s", grep(text, "polylimit_store_errors_total"))
	}
	return nil
}

// run puts level calls in flight on t for d and measures.
func run(t *target, level, redisPid int, d time.Duration) round {
	var next, over, failed atomic.Int64
	lat := make([][]time.Duration, level)
	server0, redis0, self0 := pidCPU(t.pid), pidCPU(redisPid), selfCPU()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for g := 0; g < level; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			client := t.clients[g%len(t.clients)]
			samples := make([]time.Duration, 0, 4096)
			for {
				n := next.Add(1)
				user := "u" + strconv.FormatInt(n%int64(*keys), 10)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				began := time.Now()
				reply, err := client.ShouldRateLimit(ctx, domain, 1, harness.Descriptor(nil, harness.Entry{Key: "user", Value: user}))
				took := time.Since(began)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case reply.GetOverallCode() != rlsv3.RateLimitResponse_OK:
					over.Add(1)
				}
				samples = append(samples, took)
				if began.Add(took).After(deadline) {
					break
				}
			}
			lat[g] = samples
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var all []time.Duration
	for _, s := range lat {
		all = append(all, s...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	n := float64(len(all))
	perDecision := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	return round{
		rate:      n / elapsed,
		p50:       ms(all[len(all)/2]),
		p99:       ms(all[len(all)*99/100]),
		cpuServer: perDecision(pidCPU(t.pid) - server0),
		cpuRedis:  perDecision(pidCPU(redisPid) - redis0),
		cpuLoad:   perDecision(selfCPU() - self0),
		overLimit: over.Load(),
		failed:    failed.Load(),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median is the median of each figure over the rounds.
func median(rs []round) round {
	pick := func(f func(round) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	var over, failed int64
	for _, r := range rs {
		over += r.overLimit
		failed += r.failed
	}
	return round{
		rate:      pick(func(r round) float64 { return r.rate }),
		p50:       pick(func(r round) float64 { return r.p50 }),
		p99:       pick(func(r round) float64 { return r.p99 }),
		cpuServer: pick(func(r round) float64 { return r.cpuServer }),
		cpuRedis:  pick(func(r round) float64 { return r.cpuRedis }),
		cpuLoad:   pick(func(r round) float64 { return r.cpuLoad }),
		overLimit: over,
		failed:    failed,
	}
}

func report(level int, peerVersion string, peer, ours round, all map[string][]round) error {
	ratio := ours.rate / peer.rate
	p99ratio := peer.p99 / ours.p99 // ≥ 1: p99 no worse than the peer's
	check := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "✗"
	}
	var each []string
	for i := range all[ourName] {
		each = append(each, fmt.Sprintf("%.2f", all[ourName][i].rate/all[peerName][i].rate))
	}
	bound := fmt.Sprintf("CPU per decision: %s %.1f µs + redis-server %.1f µs, load generator %.1f µs; %s %.1f µs + redis-server %.1f µs, load generator %.1f µs; each round's ratio %s",
		ourName, ours.cpuServer, ours.cpuRedis, ours.cpuLoad, peerName, peer.cpuServer, peer.cpuRedis, peer.cpuLoad, strings.Join(each, " "))
	fmt.Printf("  %3d in flight: %s %.1f k decisions/s p50 %.2f ms p99 %.2f ms | %s %.1f k decisions/s p50 %.2f ms p99 %.2f ms | %.2f× (target ≥ %.1f %s), p99 %s\n",
		level, ourName, ours.rate/1e3, ours.p50, ours.p99, peerName, peer.rate/1e3, peer.p50, peer.p99, ratio, throughput, check(ratio >= throughput), check(p99ratio >= 1))
	fmt.Printf("      %s\n", bound)
	if ours.overLimit+ours.failed+peer.overLimit+peer.failed > 0 {
		fmt.Printf("      answers not OK: %s %d over limit, %d failed; %s %d over limit, %d failed\n",
			ourName, ours.overLimit, ours.failed, peerName, peer.overLimit, peer.failed)
	}
	peers := map[string]string{peerName: peerVersion}
	err := record(map[string]any{"suite": "gateway", "what": fmt.Sprintf("polylimit-server gRPC, %d in flight, redis", level),
		"value": ours.rate, "unit": "decisions/s", "baseline": peerName, "baseline_value": peer.rate, "ratio": ratio,
		"target": throughput, "bound": bound, "peers": peers})
	if err != nil {
		return err
	}
	return record(map[string]any{"suite": "gateway", "what": fmt.Sprintf("polylimit-server gRPC p99, %d in flight, redis", level),
		"value": ours.p99, "unit": "ms", "baseline": peerName, "baseline_value": peer.p99, "ratio": p99ratio, "target": 1.0,
		"detail": fmt.Sprintf("p50 %.2f ms, p99 %.2f ms; %s p50 %.2f ms, p99 %.2f ms", ours.p50, ours.p99, peerName, peer.p50, peer.p99),
		"peers":  peers})
}

// record appends one line to $POLYLIMIT_BENCH_OUT (bench/report.py's input).
func record(line map[string]any) error {
	path := os.Getenv("POLYLIMIT_BENCH_OUT")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewEncoder(f).Encode(line)
}

func grep(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// pidCPU is a process's utime+stime from /proc/<pid>/stat (USER_HZ 100).
func pidCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
