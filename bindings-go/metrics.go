package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"encoding/json"
	"runtime"
)

// MetricsSnapshot is every metric family of a limiter at one moment, read
// from the core: the Prometheus text of Metrics is rendered from the same
// snapshot, and the otellimit module bridges it into OpenTelemetry.
type MetricsSnapshot struct {
	StartUnixNanos uint64         `json:"start_unix_nanos"` // when the limiter was built: the start of every cumulative value
	Families       []MetricFamily `json:"families"`         // in the order of the Prometheus text
}

// MetricFamily is one metric: its name, help line, kind ("counter", "gauge"
// or "histogram") and points.
type MetricFamily struct {
	Name   string        `json:"name"`   // as in the Prometheus text
	Help   string        `json:"help"`   // what it counts
	Kind   string        `json:"kind"`   // "counter", "gauge" or "histogram"
	Points []MetricPoint `json:"points"` // possibly none
}

// MetricPoint is one point of a family: its labels and, for a counter or a
// gauge, Value; for a histogram, Bounds (upper bounds, inclusive),
// BucketCounts (per bucket, not cumulative, one more than Bounds), Sum and Count.
type MetricPoint struct {
	Labels       map[string]string `json:"labels"`                  // policy, route, decision, source, ...
	Value        int64             `json:"value"`                   // a counter's or a gauge's value
	Bounds       []float64         `json:"bounds,omitempty"`        // a histogram's upper bounds, inclusive
	BucketCounts []uint64          `json:"bucket_counts,omitempty"` // a histogram's observations per bucket
	Sum          float64           `json:"sum,omitempty"`           // a histogram's sum of observations
	Count        uint64            `json:"count,omitempty"`         // a histogram's number of observations
}

// MetricsSnapshot reads every metric family of the limiter now.
func (l *Limiter) MetricsSnapshot() (MetricsSnapshot, error) {
	var snapshot MetricsSnapshot
	var out *C.char
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return snapshot, closedError()
	}
	rc := C.polylimit_limiter_metrics_snapshot(l.ptr, &out, &cerr)
	runtime.KeepAlive(l)
	if rc != C.POLYLIMIT_OK {
		return snapshot, takeError(rc, cerr)
	}
	defer C.polylimit_string_free(out)
	err := json.Unmarshal([]byte(C.GoString(out)), &snapshot)
	return snapshot, err
}
