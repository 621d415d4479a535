package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
)

// Lease holds the slots of a concurrency policy that one allowed Acquire
// took. Release gives them back when the request ends; unreleased, they end
// by themselves after the policy's Lease duration. Safe for concurrent use.
type Lease struct {
	rel    *releaser // nil when the limiter was closed while acquiring
	mu     sync.Mutex
	leases string // the core's leases as JSON (opaque); "" once released
}

// Acquire checks key like Check and, for a concurrency policy, takes cost
// slots (WithCost) until released. The lease is nil when denied or when no
// policy is a concurrency one; Check refuses a concurrency policy. A decision
// made at once (memory store) completes on the calling goroutine; a Redis
// one waits on a channel (no OS thread is held), or returns ctx.Err().
func (l *Limiter) Acquire(ctx context.Context, key string, opts ...CheckOption) (Decision, *Lease, error) {
	o := checkOptions{cost: 1, nowMs: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, nil, err
	}
	var out C.polylimit_decision_t
	var leases *C.char
	var pending *C.polylimit_pending_t
	var cerr *C.polylimit_error_t
	keyPtr, keyLen := stringArg(key)
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return Decision{}, nil, closedError()
	}
	rc := C.polylimit_limiter_try_acquire(l.ptr, keyPtr, keyLen, C.uint64_t(o.cost), C.int64_t(o.nowMs), &out, &leases, &pending, &cerr)
	l.mu.RUnlock()
	runtime.KeepAlive(key)
	var d Decision
	var text string
	switch rc {
	case C.POLYLIMIT_OK:
		d = decisionFromC(&out)
		if leases != nil {
			text = C.GoString(leases)
			C.polylimit_string_free(leases)
		}
	case C.POLYLIMIT_PENDING:
		ch, err := startPending(pending)
		if err != nil {
			return Decision{}, nil, err
		}
		select {
		case rec := <-ch:
			waiterPool.Put(ch)
			if err := rec.want(recordAcquired); err != nil {
				return Decision{}, nil, err
			}
			d, text = rec.decision, leasesJSON(rec.leases)
		case <-ctx.Done():
			// The acquire still completes: give back what it takes, so a
			// cancelled caller holds no slot until the lease ends.
			go func() {
				rec := <-ch
				waiterPool.Put(ch)
				if rec.want(recordAcquired) == nil && len(rec.leases) > 0 {
					_, _ = (&Lease{rel: l.releaser(), leases: leasesJSON(rec.leases)}).Release(context.Background())
				}
				if settled := cancelledAcquireSettled; settled != nil {
					settled()
				}
			}()
			return Decision{}, nil, ctx.Err()
		}
	default:
		return Decision{}, nil, takeError(rc, cerr)
	}
	if text == "" {
		return d, nil, nil
	}
	return d, &Lease{rel: l.releaser(), leases: text}, nil
}

// leasesJSON is the leases of an acquire's record as release reads them
// (the JSON the immediate path gives: [[policy, key, id], …]); "" for none.
func leasesJSON(leases []leaseRef) string {
	if len(leases) == 0 {
		return ""
	}
	list := make([][3]any, len(leases))
	for i, l := range leases {
		list[i] = [3]any{l.Policy, l.Key, l.ID}
	}
	text, _ := json.Marshal(list) // strings and numbers: never fails
	return string(text)
}

// cancelledAcquireSettled, set by tests only, runs once the acquire of a
// cancelled Acquire has completed and its slot (if it took one) is given back.
var cancelledAcquireSettled func()

// releaser is a second handle on the limiter (polylimit_limiter_clone) that
// the leases release through: Close frees the limiter's own handle, and
// requests still in flight release theirs afterwards. Freed by its
// finalizer once the limiter and every lease are unreachable.
type releaser struct{ ptr *C.polylimit_limiter_t }

func (r *releaser) free() { C.polylimit_limiter_free(r.ptr) }

// releaser is the leases' handle, made at the first lease (nil when closed).
func (l *Limiter) releaser() *releaser {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.rel != nil {
		return l.rel
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return nil
	}
	var out *C.polylimit_limiter_t
	if rc := C.polylimit_limiter_clone(l.ptr, &out, nil); rc != C.POLYLIMIT_OK {
		return nil
	}
	r := &releaser{ptr: out}
	runtime.SetFinalizer(r, (*releaser).free)
	l.rel = r
	return r
}

// Release gives the slots back and returns how many leases were still live
// (0 when released before, or ended). Idempotent and nil-safe: only the
// first call releases. WithNowMs releases at that time (tests). A store that
// is down is no error (the leases end by themselves), nor is a limiter
// closed since (requests in flight finish).
func (le *Lease) Release(ctx context.Context, opts ...CheckOption) (int, error) {
	if le == nil {
		return 0, nil
	}
	o := checkOptions{nowMs: -1}
	for _, opt := range opts {
		opt(&o)
	}
	le.mu.Lock()
	leases := le.leases
	le.leases = ""
	le.mu.Unlock()
	if leases == "" {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		le.restore(leases)
		return 0, err
	}
	if le.rel == nil {
		return 0, closedError()
	}
	var released C.uint64_t
	var pending *C.polylimit_pending_t
	var cerr *C.polylimit_error_t
	ptr, n := stringArg(leases)
	rc := C.polylimit_limiter_try_release(le.rel.ptr, ptr, n, C.int64_t(o.nowMs), &released, &pending, &cerr)
	runtime.KeepAlive(le.rel)
	runtime.KeepAlive(leases)
	switch rc {
	case C.POLYLIMIT_OK:
		return int(released), nil
	case C.POLYLIMIT_PENDING:
		rec, err := awaitPending(ctx, pending, recordCount)
		return int(rec.count), err
	default:
		return 0, takeError(rc, cerr)
	}
}

// Released reports whether Release was called (nil: true).
func (le *Lease) Released() bool {
	if le == nil {
		return true
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.leases == ""
}

// restore puts back leases a cancelled Release did not hand to the core.
func (le *Lease) restore(leases string) {
	le.mu.Lock()
	le.leases = leases
	le.mu.Unlock()
}
