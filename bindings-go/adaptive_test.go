package polylimit

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Adaptive limits (issue 20): the shared vectors on memory and a real Redis,
// the OnAnomaly guarantees, and the incident through net/http on a real
// Redis: 50 good clients and one that jumps 30x.

type adaptiveFile struct {
	Cases []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Policy      json.RawMessage `json:"policy"`
		Steps       []struct {
			NowMs   int64  `json:"now_ms"`
			Key     string `json:"key"`
			Cost    uint64 `json:"cost"`
			Times   int    `json:"times"`
			EveryMs int64  `json:"every_ms"`
			Peek    bool   `json:"peek"`
			Expect  struct {
				Allowed      bool            `json:"allowed"`
				Remaining    *uint64         `json:"remaining"`
				RetryAfterMs json.RawMessage `json:"retry_after_ms"`
				Source       *string         `json:"source"`
				Events       []adaptiveEvent `json:"events"`
			} `json:"expect"`
		} `json:"steps"`
	} `json:"cases"`
}

type adaptiveEvent struct {
	Kind      string  `json:"kind"`
	Key       string  `json:"key"`
	Rate      float64 `json:"rate"`
	Baseline  float64 `json:"baseline"`
	LimitedTo float64 `json:"limited_to"`
}

type eventLog struct {
	mu      sync.Mutex
	items   []AnomalyEvent
	changed chan struct{} // closed and replaced on every add
}

func (e *eventLog) add(ev AnomalyEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.items = append(e.items, ev)
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// waitFor returns the events once there are n (or the deadline passed),
// woken by each delivery.
func (e *eventLog) waitFor(n int, within time.Duration) []AnomalyEvent {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		items := append([]AnomalyEvent(nil), e.items...)
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		changed := e.changed
		e.mu.Unlock()
		if len(items) >= n {
			return items
		}
		select {
		case <-changed:
		case <-deadline.C:
			return items
		}
	}
}

func TestAdaptiveVectors(t *testing.T) {
	files := map[string]*adaptiveFile{}
	names := vectorFiles(t, "adaptive", func(name string) any { f := &adaptiveFile{}; files[name] = f; return f })
	redis := startRedis(t)
	for _, store := range []string{"memory", redis.url()} {
		for fi, name := range names {
			for ci, c := range files[name].Cases {
				events := &eventLog{}
				l, err := New(Options{Rules: fmt.Sprintf(`{"policies": [%s]}`, c.Policy), Store: store,
					Timeout: 10 * time.Second, Prefix: fmt.Sprintf("go-adaptive-%d-%d", fi, ci), OnAnomaly: events.add})
				if err != nil {
					t.Fatalf("%s: %q: %v", name, c.Name, err)
				}
				seen := 0
				for i, step := range c.Steps {
					key, cost, times := step.Key, step.Cost, step.Times
					if key == "" {
						key = "k"
					}
					if cost == 0 {
						cost = 1
					}
					if times == 0 {
						times = 1
					}
					for n := 0; n < times; n++ {
						now := step.NowMs + int64(n)*step.EveryMs
						call := l.Check
						if step.Peek {
							call = l.Peek
						}
						d, err := call(context.Background(), key, WithCost(cost), WithNowMs(now))
						if err != nil {
							t.Fatalf("%s: %q step %d: %v", name, c.Name, i, err)
						}
						e := step.Expect
						bad := d.Allowed != e.Allowed ||
							(e.Remaining != nil && *e.Remaining != d.Remaining) ||
							(e.Source != nil && *e.Source != string(d.Source))
						if len(e.RetryAfterMs) > 0 {
							want := string(e.RetryAfterMs)
							got := "null"
							if d.HasRetryAfter {
								got = fmt.Sprint(d.RetryAfter.Milliseconds())
							}
							bad = bad || got != want
						}
						if bad {
							t.Errorf("%s: %s: %q step %d at %d: got %+v", store, name, c.Name, i, now, d)
						}
					}
					wait := 20 * time.Millisecond
					if len(step.Expect.Events) > 0 {
						wait = 5 * time.Second
					}
					items := events.waitFor(seen+len(step.Expect.Events), wait)[seen:]
					seen += len(items)
					got := []adaptiveEvent{}
					for _, ev := range items {
						got = append(got, adaptiveEvent{Kind: strings.TrimPrefix(ev.Event, "polylimit."), Key: ev.Key,
							Rate: ev.Rate, Baseline: ev.Baseline, LimitedTo: ev.LimitedTo})
					}
					want := step.Expect.Events
					if want == nil {
						want = []adaptiveEvent{}
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: %s: %q step %d: events %v, want %v", store, name, c.Name, i, got, want)
					}
				}
				l.Close()
			}
		}
	}
}

func TestOnAnomalyPanicIsCountedNeverReachesTheRequest(t *testing.T) {
	delivered := make(chan struct{}, 1)
	hook := func() {
		select {
		case delivered <- struct{}{}:
		default:
		}
	}
	anomalyDelivered.Store(&hook)
	defer anomalyDelivered.Store(nil)
	l, err := New(Options{
		Policy:    &Policy{Rate: "1000/s", Adaptive: &Adaptive{Window: time.Second, Horizon: 4 * time.Second, Factor: 3, Floor: "4/s"}},
		OnAnomaly: func(AnomalyEvent) { panic("alerting is down") },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for now := int64(0); now < 4000; now += 500 {
		if d, _ := l.Check(ctx, "k", WithNowMs(now)); !d.Allowed {
			t.Fatal("denied while warming up")
		}
	}
	var sources []string
	for i := 0; i < 6; i++ {
		d, err := l.Check(ctx, "k", WithNowMs(4000))
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, string(d.Source))
	}
	if fmt.Sprint(sources) != "[store store store store adaptive adaptive]" {
		t.Fatalf("sources %v", sources)
	}
	// Woken after each delivery (another test's late one too): done once
	// this limiter has counted the panic.
	for {
		select {
		case <-delivered:
		case <-time.After(5 * time.Second):
			text, _ := l.Metrics()
			t.Fatal("the panic was not counted: ", text)
		}
		if text, _ := l.Metrics(); strings.Contains(text, "polylimit_anomaly_callback_errors_total 1\n") {
			return
		}
	}
}

// The incident on real traffic: windows of 1 s, horizon 4 s; every client
// sends 2 requests a second; from warm the bad one sends 60 (30x) for
// attack, then 2 again for calm.
func TestIncidentThroughNetHTTPOnRedis(t *testing.T) {
	const good, normal, burst = 50, 2.0, 60.0
	const warm, attack, calm = 5.0, 3.0, 4.0
	redis := startRedis(t)
	events := &eventLog{}
	l, err := New(Options{
		Policy: &Policy{Name: "payments", Rate: "1000/s", Adaptive: &Adaptive{
			Window: time.Second, Horizon: 4 * time.Second, Factor: 10, Floor: "10/s", MinRate: "5/s", AlertKeys: "raw"}},
		KeyBy: []string{"header:x-client"}, Store: redis.url(), Timeout: 10 * time.Second, Prefix: "go-incident", OnAnomaly: events.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	type row struct {
		at     float64
		status int
	}
	var mu sync.Mutex
	log := map[string][]row{}
	start := time.Now()
	var wg sync.WaitGroup
	run := func(name string, bad bool) {
		defer wg.Done()
		h := fnv.New32a()
		_, _ = h.Write([]byte(name))
		t0 := 0.0
		if !bad {
			t0 = float64(h.Sum32()%500) / 1000
		}
		for at := t0; at < warm+attack+calm; {
			due := start.Add(time.Duration(at * float64(time.Second)))
			if late := time.Since(due); late > 250*time.Millisecond {
				// A paced client skips the sends it missed instead of bursting
				// them: on a loaded host a burst of late calm sends would look
				// like the attack going on.
				at += late.Seconds()
			}
			rate := normal
			if bad && at >= warm && at < warm+attack {
				rate = burst
			}
			time.Sleep(time.Until(due))
			sent := time.Since(start).Seconds()
			req, _ := http.NewRequest("GET", srv.URL+"/pay", nil)
			req.Header.Set("x-client", name)
			resp, err := client.Do(req)
			status := 0
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			}
			mu.Lock()
			log[name] = append(log[name], row{sent, status})
			mu.Unlock()
			at += 1 / rate
		}
	}
	wg.Add(good + 1)
	for i := 0; i < good; i++ {
		go run(fmt.Sprintf("good-%d", i), false)
	}
	go run("bad", true)
	wg.Wait()
	items := events.waitFor(2, 5*time.Second)
	goodRefused, total := 0, 0
	for name, rows := range log {
		total += len(rows)
		for _, r := range rows {
			if strings.HasPrefix(name, "good") && r.status != 200 {
				goodRefused++
			}
		}
	}
	var refused []float64
	for _, r := range log["bad"] {
		if r.status == 429 {
			refused = append(refused, r.at)
		}
	}
	summary := []string{}
	for _, e := range items {
		summary = append(summary, fmt.Sprintf("%s rate %.1f baseline %.3f limited to %.1f", e.Event, e.Rate, e.Baseline, e.LimitedTo))
	}
	first, last := 0.0, 0.0
	if len(refused) > 0 {
		first, last = refused[0], refused[len(refused)-1]
	}
	t.Logf("incident: %d requests; good clients refused: %d; bad: %d requests, %d refused between %.2fs and %.2fs; events: %v",
		total, goodRefused, len(log["bad"]), len(refused), first, last, summary)
	if goodRefused != 0 {
		t.Errorf("good clients refused %d times", goodRefused)
	}
	if len(items) != 2 || items[0].Event != "polylimit.anomalous" || items[1].Event != "polylimit.recovered" ||
		!strings.Contains(items[0].Key, "bad") || !strings.Contains(items[1].Key, "bad") {
		t.Fatalf("events %+v", items)
	}
	if len(refused) == 0 || first < warm || first > warm+1.5 {
		t.Errorf("first refusal at %.2fs (%d refusals)", first, len(refused))
	}
	for _, r := range log["bad"] {
		if r.at >= warm+attack+calm-2 && r.status != 200 {
			t.Errorf("still refused at %.2fs after calming down", r.at)
		}
	}
	if !(items[0].Rate > 10*items[0].Baseline) || items[0].LimitedTo != 5 {
		t.Errorf("alert %+v", items[0])
	}
	metrics, _ := l.Metrics()
	for _, want := range []string{`polylimit_anomalies_total{policy="payments"} 1`, `polylimit_anomalous_keys{policy="payments"} 0`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}
