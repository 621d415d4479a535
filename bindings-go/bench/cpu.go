package main

import (
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisPid is the pid of the benchmark's redis-server (startRedis).
var redisPid int

// cpuUse is the CPU one request (or decision) cost: this process and
// redis-server, in µs, and the cores the whole machine kept busy meanwhile.
type cpuUse struct{ process, redis, busy float64 }

type cpuStart struct {
	self, redis time.Duration
	busy, total float64
	ok          bool
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is the utime+stime of a process from /proc/<pid>/stat (USER_HZ 100).
func pidCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// machine is the busy and total jiffies of all cores (/proc/stat).
func machine() (busy, total float64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	first := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1:]
	var idle float64
	for i, f := range first {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return total - idle, total, true
}

func startCPU() cpuStart {
	c := cpuStart{self: selfCPU(), redis: pidCPU(redisPid)}
	c.busy, c.total, c.ok = machine()
	return c
}

// stop returns the CPU per unit of work, n units done since startCPU.
func (c cpuStart) stop(n int64) cpuUse {
	if n == 0 {
		return cpuUse{}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	u := cpuUse{process: per(selfCPU() - c.self), redis: per(pidCPU(redisPid) - c.redis)}
	if busy, total, ok := machine(); ok && c.ok && total > c.total {
		u.busy = (busy - c.busy) / (total - c.total) * float64(runtime.NumCPU())
	}
	return u
}

// medianCPU is the median of each figure over rounds.
func medianCPU(xs []cpuUse) cpuUse {
	pick := func(f func(cpuUse) float64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return cpuUse{
		process: pick(func(x cpuUse) float64 { return x.process }),
		redis:   pick(func(x cpuUse) float64 { return x.redis }),
		busy:    pick(func(x cpuUse) float64 { return x.busy }),
	}
}

// threadCPU is the CPU of each of this process's threads by name, from
// /proc/self/task (Go's threads carry the program's name, the core's runtime
// threads "polylimit").
type threadCPU struct {
	at       map[string]time.Duration
	switches int64
}

// switches is the context switches of this process's threads so far.
func switches() int64 {
	var n int64
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "voluntary_ctxt_switches:") || strings.HasPrefix(l, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]), 10, 64)
				n += v
			}
		}
	}
	return n
}

func readThreads() (map[string]time.Duration, map[string]int) {
	cpu, count := map[string]time.Duration{}, map[string]int{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return cpu, count
	}
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		name := s[open+1 : close]
		fields := strings.Fields(s[close+2:])
		if len(fields) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		k, _ := strconv.ParseInt(fields[12], 10, 64)
		cpu[name] += time.Duration(u+k) * 10 * time.Millisecond
		count[name]++
	}
	return cpu, count
}

func startThreads() threadCPU {
	at, _ := readThreads()
	return threadCPU{at: at, switches: switches()}
}

// print prints the CPU per request of each thread name since startThreads
// (lastRequests: the requests of the run).
func (t threadCPU) print(what string) {
	now, count := readThreads()
	names := make([]string, 0, len(now))
	for name := range now {
		names = append(names, name)
	}
	sort.Strings(names)
	text := "    threads, " + what + ":"
	for _, name := range names {
		d := now[name] - t.at[name]
		text += " " + name + "×" + strconv.Itoa(count[name]) + " " + strconv.FormatFloat(float64(d.Microseconds())/float64(lastRequests), 'f', 1, 64) + " µs"
	}
	text += " context switches " + strconv.FormatFloat(float64(switches()-t.switches)/float64(lastRequests), 'f', 2, 64) + " per request"
	println(text)
}
