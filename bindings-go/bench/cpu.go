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
