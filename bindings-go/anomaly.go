package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"
)

// AnomalyEvent is an alert of an adaptive policy: a key became anomalous
// (Action "limit") or recovered ("restore").
type AnomalyEvent struct {
	Event      string  `json:"event"`      // "polylimit.anomalous" or "polylimit.recovered"
	Policy     string  `json:"policy"`     // the policy's name
	Key        string  `json:"key"`        // the key as AlertKeys says (default: ip and key values hashed)
	Rate       float64 `json:"rate"`       // requests per second over the short window
	Baseline   float64 `json:"baseline"`   // the key's baseline, requests per second
	Action     string  `json:"action"`     // "limit" or "restore"
	LimitedTo  float64 `json:"limited_to"` // the budget while anomalous, requests per second (0 on recovery)
	AtMs       int64   `json:"at_ms"`      // the decision's time (the store's clock), ms since the epoch
	Suppressed uint64  `json:"suppressed"` // alerts of the policy dropped by the storm limit since the last one
}

// anomalySink is where a limiter's alerts go: the user's function and the
// core's counter of failed deliveries (not the limiter, so a forgotten
// limiter is still collected). Alerts come from the completion bridge
// (completions.go) as JSON records; one goroutine at a time decodes and
// delivers them, in order, and ends when none is left.
type anomalySink struct {
	f       func(AnomalyEvent)
	counter *C.polylimit_counter_t

	mu      sync.Mutex
	pending []string // alerts' JSON not yet delivered, oldest first
	running bool     // a goroutine is delivering pending
}

// maxPendingAlerts is how many alerts wait for a slow function at most;
// more are dropped and counted (as the core's alert thread does).
const maxPendingAlerts = 1024

// enqueue hands one alert's JSON to the sink's goroutine, starting it when
// none runs. Never blocks on the user's function.
func (s *anomalySink) enqueue(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= maxPendingAlerts {
		C.polylimit_counter_add(s.counter)
		return
	}
	s.pending = append(s.pending, text)
	if !s.running {
		s.running = true
		go s.run()
	}
}

// run delivers the pending alerts in order until none is left.
func (s *anomalySink) run() {
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		if len(batch) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, text := range batch {
			var ev AnomalyEvent
			if err := json.Unmarshal([]byte(text), &ev); err != nil {
				C.polylimit_counter_add(s.counter)
				continue
			}
			s.deliver(ev)
		}
	}
}

// anomalyDelivered, when set (by tests), runs after each delivery, its
// panic counted.
var anomalyDelivered atomic.Pointer[func()]

// deliver calls the user's function; a panic is counted
// (polylimit_anomaly_callback_errors_total), never reaches a request.
func (s *anomalySink) deliver(ev AnomalyEvent) {
	defer func() {
		if p := recover(); p != nil {
			C.polylimit_counter_add(s.counter)
		}
		if hook := anomalyDelivered.Load(); hook != nil {
			(*hook)()
		}
	}()
	s.f(ev)
}

// setAnomaly registers f with the core: its alerts come as records of the
// completion bridge. Close unregisters it.
func (l *Limiter) setAnomaly(f func(AnomalyEvent)) error {
	s := &anomalySink{f: f}
	id, err := addAlertSink(s)
	if err != nil {
		return err
	}
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_limiter_on_anomaly_queued(l.ptr, completions.bridge, C.uint64_t(id), &s.counter, &cerr); rc != C.POLYLIMIT_OK {
		dropAlertSink(id)
		return takeError(rc, cerr)
	}
	runtime.SetFinalizer(s, func(s *anomalySink) { C.polylimit_counter_free(s.counter) })
	l.anomaly = func() { dropAlertSink(id) }
	return nil
}

// dropAnomaly removes the sink from the core and unregisters it; alerts
// already on their way find no sink and are dropped.
func (l *Limiter) dropAnomaly() {
	if l.anomaly != nil {
		C.polylimit_limiter_on_anomaly_queued(l.ptr, nil, 0, nil, nil)
		l.anomaly()
		l.anomaly = nil
	}
}
