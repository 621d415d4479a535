package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"math"
	"time"
)

// Source says who decided.
type Source string

// The sources, with the names every binding uses.
const (
	SourceStore      Source = "store"
	SourceLocal      Source = "local"
	SourceFailOpen   Source = "fail_open"
	SourceFailClosed Source = "fail_closed"
	SourcePenalty    Source = "penalty"
	SourceAllowlist  Source = "allowlist"
	SourceDenylist   Source = "denylist"
	SourceAdaptive   Source = "adaptive"
)

// sources are the core's names by polylimit_source_t, read from the C
// library once (TestSourcesAreTheCores checks that each has its constant above).
var sources = func() []Source {
	var names []Source
	for i := 0; ; i++ {
		name := C.GoString(C.polylimit_source_name(C.int32_t(i)))
		if name == "unknown" {
			return names
		}
		names = append(names, Source(name))
	}
}()

// Decision is the answer of a check (SPEC §3).
type Decision struct {
	// Allowed: the request may proceed.
	Allowed bool
	// Limit is the policy's count (burst for buckets, limit per window).
	Limit uint64
	// Remaining whole requests right after this decision.
	Remaining uint64
	// ResetAfter: time until the key is back to its full, idle state.
	ResetAfter time.Duration
	// RetryAfter: when denied, time until the same request could be allowed.
	// Meaningful only when HasRetryAfter (false when allowed, and when the
	// cost can never fit).
	RetryAfter    time.Duration
	HasRetryAfter bool // whether RetryAfter is set
	// Delay: shape mode, how long to hold the request before serving it.
	Delay time.Duration
	// Source: who decided.
	Source Source
}

func ms(v C.uint64_t) time.Duration { return millis(uint64(v)) }

// millis is v milliseconds, saturating where time.Duration ends (about 292
// years): the core reports exact times however far a clock jumped.
func millis(v uint64) time.Duration {
	if v > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v) * time.Millisecond
}

func decisionFromC(d *C.polylimit_decision_t) Decision {
	return Decision{
		Allowed:       bool(d.allowed),
		Limit:         uint64(d.limit),
		Remaining:     uint64(d.remaining),
		ResetAfter:    ms(d.reset_after_ms),
		RetryAfter:    ms(d.retry_after_ms),
		HasRetryAfter: bool(d.has_retry_after),
		Delay:         ms(d.delay_ms),
		Source:        sourceOf(int(d.source)),
	}
}

// sourceOf is the Source of a polylimit_source_t.
func sourceOf(i int) Source {
	if i >= 0 && i < len(sources) {
		return sources[i]
	}
	return Source("unknown")
}
