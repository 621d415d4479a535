// One process of the sync measurement (tests/e2e/sync_run.py): checks one key
// at full speed through the Go binding and prints what it admitted.
// Usage: sync-driver <store url> <policy JSON> <key> <seconds>. Prints "ready"
// once connected, waits for a line on stdin, runs, prints one JSON line.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
)

// policy is the JSON policy the other drivers hand their binding as is.
type policy struct {
	Algorithm string `json:"algorithm"`
	Rate      string `json:"rate"`
	Burst     uint64 `json:"burst"`
	Sync      *struct {
		Interval string `json:"interval"`
		Share    uint64 `json:"share"`
	} `json:"sync"`
}

func main() {
	if len(os.Args) != 5 {
		log.Fatal("usage: sync-driver <store url> <policy JSON> <key> <seconds>")
	}
	url, key := os.Args[1], os.Args[3]
	var p policy
	if err := json.Unmarshal([]byte(os.Args[2]), &p); err != nil {
		log.Fatal(err)
	}
	seconds, err := strconv.ParseFloat(os.Args[4], 64)
	if err != nil {
		log.Fatal(err)
	}
	pol := &polylimit.Policy{Algorithm: p.Algorithm, Rate: p.Rate, Burst: p.Burst}
	if p.Sync != nil {
		pol.Sync = &polylimit.Sync{Share: p.Sync.Share}
		if p.Sync.Interval != "" {
			if pol.Sync.Interval, err = time.ParseDuration(p.Sync.Interval); err != nil {
				log.Fatal(err)
			}
		}
	}
	// A timeout a loaded machine does not reach: a call that timed out would be
	// decided by the local fallback, outside the shared limit.
	limiter, err := polylimit.New(polylimit.Options{Policy: pol, Store: url, Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	if _, err := limiter.Check(ctx, "warm-up:"+key); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		log.Fatal(err)
	}
	// A few goroutines, as a server's concurrent requests are.
	const workers = 4
	var admitted, decisions [workers]int64
	started := time.Now()
	end := started.Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(end) {
				for i := 0; i < 64; i++ {
					d, err := limiter.Check(ctx, key)
					if err != nil {
						log.Fatal(err)
					}
					decisions[w]++
					if d.Allowed {
						admitted[w]++
					}
				}
			}
		}(w)
	}
	wg.Wait()
	var a, n int64
	for w := 0; w < workers; w++ {
		a += admitted[w]
		n += decisions[w]
	}
	out, _ := json.Marshal(map[string]any{"lang": "go", "admitted": a, "decisions": n, "seconds": time.Since(started).Seconds()})
	fmt.Println(string(out))
}
