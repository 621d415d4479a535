package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
)

// BreakerState is a circuit breaker's state.
type BreakerState string

// The states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// CircuitBreaker guards your own downstream calls with the core's breaker:
// it opens after threshold consecutive failures, lets halfOpenMax probes
// through after cooldown, and closes when they all succeed.
type CircuitBreaker struct {
	mu  sync.RWMutex
	ptr *C.polylimit_breaker_t
}

// NewCircuitBreaker builds a closed breaker. The core checks the values:
// a zero count or a cooldown not above zero is a config *Error naming it
// (`cooldown: 0 is not a positive duration`, the value in ns).
func NewCircuitBreaker(threshold uint32, cooldown time.Duration, halfOpenMax uint32) (*CircuitBreaker, error) {
	var ptr *C.polylimit_breaker_t
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_breaker_new(C.int64_t(threshold), C.int64_t(cooldown), C.int64_t(halfOpenMax), &ptr, &cerr); rc != C.POLYLIMIT_OK {
		return nil, takeError(rc, cerr)
	}
	b := &CircuitBreaker{ptr: ptr}
	runtime.SetFinalizer(b, (*CircuitBreaker).Close)
	return b, nil
}

// Call runs fn through the breaker. When the breaker is open, fn is not run
// and fallback gets ErrBreakerOpen; when fn fails, fallback gets its error.
// The result is fn's (nil) or fallback's.
func (b *CircuitBreaker) Call(fn func() error, fallback func(error) error) error {
	b.mu.RLock()
	if b.ptr == nil {
		b.mu.RUnlock()
		return closedError()
	}
	permit := C.polylimit_breaker_acquire(b.ptr)
	b.mu.RUnlock()
	if permit == nil {
		return fallback(ErrBreakerOpen)
	}
	finished := false
	defer func() {
		if !finished {
			// fn panicked: a failure; the panic keeps unwinding.
			b.report(permit, false)
		}
	}()
	err := fn()
	finished = true
	b.report(permit, err == nil)
	if err != nil {
		return fallback(err)
	}
	return nil
}

func (b *CircuitBreaker) report(permit *C.polylimit_permit_t, ok bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	// A closed breaker (NULL) only frees the permit.
	if ok {
		C.polylimit_breaker_success(b.ptr, permit)
	} else {
		C.polylimit_breaker_failure(b.ptr, permit)
	}
}

// State is the breaker's state.
func (b *CircuitBreaker) State() BreakerState {
	b.mu.RLock()
	defer b.mu.RUnlock()
	switch C.polylimit_breaker_state(b.ptr) {
	case C.POLYLIMIT_BREAKER_OPEN:
		return BreakerOpen
	case C.POLYLIMIT_BREAKER_HALF_OPEN:
		return BreakerHalfOpen
	default:
		return BreakerClosed
	}
}

// Close frees the breaker. Idempotent.
func (b *CircuitBreaker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ptr != nil {
		C.polylimit_breaker_free(b.ptr)
		b.ptr = nil
		runtime.SetFinalizer(b, nil)
	}
	return nil
}
