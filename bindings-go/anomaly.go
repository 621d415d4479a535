package polylimit

/*
#include "polylimit.h"

// Declared by anomaly.go (//export polylimitGoAnomaly).
extern void polylimitGoAnomaly(size_t, char *, size_t);

static polylimit_anomaly_callback_t polylimit_go_anomaly(void) {
	return (polylimit_anomaly_callback_t)polylimitGoAnomaly;
}
*/
import "C"

import (
	"encoding/json"
	"runtime"
	"runtime/cgo"
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

// anomalySink is what the cgo.Handle given to the core holds: the user's
// function and the core's counter of failed callbacks (not the limiter, so
// a forgotten limiter is still collected).
type anomalySink struct {
	f       func(AnomalyEvent)
	counter *C.polylimit_counter_t
}

// polylimitGoAnomaly runs on a polylimit runtime thread, on the deciding
// task: it decodes the alert and hands it to a goroutine at once.
//
//export polylimitGoAnomaly
func polylimitGoAnomaly(ctx C.size_t, text *C.char, n C.size_t) {
	defer func() { _ = recover() }() // a removed handle: the limiter is closed
	s := cgo.Handle(ctx).Value().(*anomalySink)
	var ev AnomalyEvent
	if err := json.Unmarshal([]byte(C.GoStringN(text, C.int(n))), &ev); err != nil {
		C.polylimit_counter_add(s.counter)
		return
	}
	go s.deliver(ev)
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

// setAnomaly registers f with the core; the handle is deleted by Close.
func (l *Limiter) setAnomaly(f func(AnomalyEvent)) error {
	s := &anomalySink{f: f}
	h := cgo.NewHandle(s)
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_limiter_on_anomaly(l.ptr, C.polylimit_go_anomaly(), C.size_t(h), &s.counter, &cerr); rc != C.POLYLIMIT_OK {
		h.Delete()
		return takeError(rc, cerr)
	}
	runtime.SetFinalizer(s, func(s *anomalySink) { C.polylimit_counter_free(s.counter) })
	l.anomaly = h
	return nil
}

// dropAnomaly removes the callback from the core and deletes its handle;
// alerts already on their way find no handle and are dropped.
func (l *Limiter) dropAnomaly() {
	if l.anomaly != 0 {
		C.polylimit_limiter_on_anomaly(l.ptr, nil, 0, nil, nil)
		l.anomaly.Delete()
		l.anomaly = 0
	}
}
