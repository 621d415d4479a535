// Package polylimit is the Go binding of polylimit, a distributed rate
// limiter whose algorithms, Redis scripts, fallback and HTTP rules live in one
// Rust core (reached through cgo and the C ABI in capi/).
package polylimit

/*
#cgo CFLAGS: -I${SRCDIR}/capi/include
#include <stdlib.h>
#include "polylimit.h"

// The decisions made at once neither keep a Go pointer nor call Go: their
// out-pointers may then live on the caller's stack.
#cgo noescape polylimit_limiter_try_check
#cgo nocallback polylimit_limiter_try_check
#cgo noescape polylimit_limiter_try_check_request
#cgo nocallback polylimit_limiter_try_check_request
#cgo noescape polylimit_limiter_try_peek
#cgo nocallback polylimit_limiter_try_peek
#cgo noescape polylimit_limiter_try_complete
#cgo nocallback polylimit_limiter_try_complete
#cgo noescape polylimit_limiter_try_acquire
#cgo nocallback polylimit_limiter_try_acquire
#cgo noescape polylimit_limiter_try_release
#cgo nocallback polylimit_limiter_try_release
#cgo noescape polylimit_limiter_clone
#cgo nocallback polylimit_limiter_clone
#cgo nocallback polylimit_ended_status
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Limiter decides whether requests may proceed. Safe for concurrent use.
// Call Close when done (a finalizer frees it if you forget).
type Limiter struct {
	mu  sync.RWMutex // Close takes it for writing; calls that use ptr for reading.
	ptr *C.polylimit_limiter_t

	relMu sync.Mutex // guards rel
	rel   *releaser  // the leases' handle (lease.go), made at the first lease

	anomaly func() // unregisters Options.OnAnomaly's sink (anomaly.go), run by Close

	known atomic.Pointer[knownRules] // what the middleware remembers of the rules in force (known.go)

	sio     *sansIo      // Check's own connection to Redis (sansio.go), nil when the core gives no address
	pipe    *sansPipe    // the requests' own connections to Redis, pipelined (sansio_pipe.go); nil as sio
	waiting atomic.Int32 // Checks waiting for the store the usual way: the sans-I/O path is for a lone check
}

func wrap(build func(out **C.polylimit_limiter_t, err **C.polylimit_error_t) C.int32_t) (*Limiter, error) {
	var ptr *C.polylimit_limiter_t
	var cerr *C.polylimit_error_t
	if rc := build(&ptr, &cerr); rc != C.POLYLIMIT_OK {
		return nil, takeError(rc, cerr)
	}
	l := &Limiter{ptr: ptr, sio: newSansIo(ptr)}
	if l.sio != nil {
		l.pipe = newSansPipe(l.sio.addr, l.sio.timeout)
	}
	runtime.SetFinalizer(l, (*Limiter).Close)
	return l, nil
}

// optionsJSON is opts as the core reads it: the struct as encoding/json
// writes it, in Go's field names.
func optionsJSON(opts Options) (*C.char, error) {
	text, err := json.Marshal(opts)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidArgument, Message: err.Error()}
	}
	return C.CString(string(text)), nil
}

// New builds a limiter from options. It fails only on bad configuration
// (a *ConfigError naming the field as written: "Policy.Rate"); Redis is
// connected lazily.
func New(opts Options) (*Limiter, error) {
	text, err := optionsJSON(opts)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(text))
	l, err := wrap(func(out **C.polylimit_limiter_t, err **C.polylimit_error_t) C.int32_t {
		return C.polylimit_limiter_build(text, out, err)
	})
	if err == nil && opts.OnAnomaly != nil {
		if err = l.setAnomaly(opts.OnAnomaly); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, err
}

// FromRules builds a limiter from the text of a rules file (YAML or JSON):
// New(Options{Rules: rules}).
func FromRules(rules string) (*Limiter, error) { return New(Options{Rules: rules}) }

// FromFile builds a limiter from a rules file (YAML or JSON):
// New(Options{RulesFile: path}).
func FromFile(path string) (*Limiter, error) { return New(Options{RulesFile: path}) }

// EffectiveConfig is the configuration New(opts) would build, in canonical
// form: every option under its rules-file name with its effective value
// (defaults included), each policy with every field, and the rules. Errors
// are New's.
func EffectiveConfig(opts Options) (map[string]any, error) {
	text, err := optionsJSON(opts)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(text))
	var out *C.char
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_effective_config(text, &out, &cerr); rc != C.POLYLIMIT_OK {
		return nil, takeError(rc, cerr)
	}
	defer C.polylimit_string_free(out)
	var config map[string]any
	if err := json.Unmarshal([]byte(C.GoString(out)), &config); err != nil {
		return nil, &Error{Kind: ErrInternal, Message: "effective configuration: " + err.Error()}
	}
	return config, nil
}

// CheckOption adjusts one check.
type CheckOption func(*checkOptions)

type checkOptions struct {
	cost  uint64
	nowMs int64
}

// WithCost makes the request cost n units (default 1).
func WithCost(n uint64) CheckOption { return func(o *checkOptions) { o.cost = n } }

// WithNowMs decides at this time (ms since the epoch) instead of the store's
// clock; for tests and simulations.
func WithNowMs(ms int64) CheckOption { return func(o *checkOptions) { o.nowMs = ms } }

func stringArg(s string) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// Check decides whether key may proceed. With several policies the decision
// is the one closest to denying. A decision made at once (memory store, a
// local decision) completes on the calling goroutine with no channel; a
// Redis check waits on a channel (no OS thread is held), and returns
// ctx.Err() if ctx ends first.
func (l *Limiter) Check(ctx context.Context, key string, opts ...CheckOption) (Decision, error) {
	return l.decide(ctx, key, false, opts)
}

// Peek returns the decision Check would return now (same options), charging
// nothing and recording no penalty; peeks are not counted in the metrics.
// While the store is down, each policy's on_store_error decides as for a
// check ("local" peeks the local fallback).
func (l *Limiter) Peek(ctx context.Context, key string, opts ...CheckOption) (Decision, error) {
	return l.decide(ctx, key, true, opts)
}

// decide is Check, or Peek when peek is set.
func (l *Limiter) decide(ctx context.Context, key string, peek bool, opts []CheckOption) (Decision, error) {
	o := checkOptions{cost: 1, nowMs: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if !peek && o.nowMs < 0 && l.sio != nil && l.waiting.Load() == 0 {
		if d, err, ok := l.sio.check(ctx, l, key, o.cost); ok {
			return d, err
		}
	}
	var out C.polylimit_decision_t
	var pending *C.polylimit_pending_t
	var cerr *C.polylimit_error_t
	keyPtr, keyLen := stringArg(key)
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return Decision{}, closedError()
	}
	var rc C.int32_t
	if peek {
		rc = C.polylimit_limiter_try_peek(l.ptr, keyPtr, keyLen, C.uint64_t(o.cost), C.int64_t(o.nowMs), &out, &pending, &cerr)
	} else {
		rc = C.polylimit_limiter_try_check(l.ptr, keyPtr, keyLen, C.uint64_t(o.cost), C.int64_t(o.nowMs), &out, &pending, &cerr)
	}
	l.mu.RUnlock()
	runtime.KeepAlive(key)
	switch rc {
	case C.POLYLIMIT_OK:
		return decisionFromC(&out), nil
	case C.POLYLIMIT_PENDING:
		l.waiting.Add(1)
		rec, err := awaitPending(ctx, pending, recordDecision)
		l.waiting.Add(-1)
		return rec.decision, err
	default:
		return Decision{}, takeError(rc, cerr)
	}
}

// awaitPending starts an operation that waits for the store (startPending)
// and waits for its record, of kind, or for ctx.
func awaitPending(ctx context.Context, pending *C.polylimit_pending_t, kind uint8) (record, error) {
	ch, err := startPending(pending)
	if err != nil {
		return record{}, err
	}
	select {
	case rec := <-ch:
		waiterPool.Put(ch)
		return rec, rec.want(kind)
	case <-ctx.Done():
		// The record still comes to ch (buffered), which is not reused.
		return record{}, ctx.Err()
	}
}

// checkBlocking is Check through polylimit_limiter_check_blocking: the cgo
// call holds its OS thread until the store answers. Only the tests and the
// benchmark use it, to show what the bridge saves.
func (l *Limiter) checkBlocking(key string) (Decision, error) {
	var out C.polylimit_decision_t
	var cerr *C.polylimit_error_t
	keyPtr, keyLen := stringArg(key)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return Decision{}, closedError()
	}
	rc := C.polylimit_limiter_check_blocking(l.ptr, keyPtr, keyLen, 1, -1, &out, &cerr)
	runtime.KeepAlive(key)
	if rc != C.POLYLIMIT_OK {
		return Decision{}, takeError(rc, cerr)
	}
	return decisionFromC(&out), nil
}

func closedError() error { return &Error{Kind: ErrClosed, Message: "limiter is closed"} }

// CheckRequest decides an HTTP request by the limiter's rules: what
// Middleware calls, for other frameworks to reuse.
func (l *Limiter) CheckRequest(ctx context.Context, req *RequestInfo) (*Outcome, error) {
	return l.checkRequest(ctx, req, true)
}

// PeekRequest returns the outcome CheckRequest would return now, charging
// nothing and recording no penalty; not counted in the metrics.
func (l *Limiter) PeekRequest(ctx context.Context, req *RequestInfo) (*Outcome, error) {
	return l.decideRequest(ctx, req, C.POLYLIMIT_WITH_DECISIONS|C.POLYLIMIT_PEEK)
}

// ResetRequest forgets every (policy, key) CheckRequest would charge for req
// (the same rules, tiers and keys), penalty blocks included, so a blocked
// client starts afresh. Returns how many (policy, key) pairs were forgotten:
// 0 when no rule limits req. Waits for the store.
func (l *Limiter) ResetRequest(ctx context.Context, req *RequestInfo) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := getPacker()
	defer putPacker(p)
	p.request(req)
	if p.tooLong {
		return 0, &Error{Kind: ErrInvalidArgument, Message: "request: a string of 4 GiB or more"}
	}
	flags, err := matchFlags(req)
	if err != nil {
		return 0, err
	}
	var count C.size_t
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return 0, closedError()
	}
	rc := C.polylimit_limiter_reset_request(l.ptr, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(p.buf))), C.size_t(len(p.buf)),
		flags, &count, &cerr)
	runtime.KeepAlive(p)
	if rc != C.POLYLIMIT_OK {
		return 0, takeError(rc, cerr)
	}
	return int(count), nil
}

// matchFlags are the router's path-matching flags of req, and its kind's;
// an unknown kind is a *ConfigError naming "request.kind".
func matchFlags(req *RequestInfo) (C.uint32_t, error) {
	var flags C.uint32_t
	if req.CaseInsensitive {
		flags |= C.POLYLIMIT_CASE_INSENSITIVE
	}
	if req.IgnoreTrailingSlash {
		flags |= C.POLYLIMIT_IGNORE_TRAILING_SLASH
	}
	switch req.Kind {
	case "", KindHTTP:
	case KindGRPC:
		flags |= C.POLYLIMIT_GRPC
	default:
		return 0, &ConfigError{Field: "request.kind", Value: req.Kind,
			Message: fmt.Sprintf("request.kind: %q is not %q or %q", req.Kind, KindHTTP, KindGRPC)}
	}
	return flags, nil
}

// checkRequest is CheckRequest; without decisions, Outcome.Decisions stays
// empty and the answer is cheaper to build and read.
func (l *Limiter) checkRequest(ctx context.Context, req *RequestInfo, withDecisions bool) (*Outcome, error) {
	var flags C.uint32_t
	if withDecisions {
		flags |= C.POLYLIMIT_WITH_DECISIONS
	}
	return l.decideRequest(ctx, req, flags)
}

// decideRequest decides req with flags (C.POLYLIMIT_WITH_DECISIONS,
// C.POLYLIMIT_PEEK) and the request's own path-matching flags and clock.
func (l *Limiter) decideRequest(ctx context.Context, req *RequestInfo, flags C.uint32_t) (*Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := getPacker()
	defer putPacker(p)
	match, err := matchFlags(req)
	if err != nil {
		return nil, err
	}
	p.request(req)
	flags |= match
	var nowMs int64
	if req.NowMs != nil {
		nowMs = *req.NowMs
		flags |= C.POLYLIMIT_HAS_NOW_MS
	}
	packed, err := l.tryRequest(ctx, p, req.Cost, nowMs, flags)
	if err != nil {
		return nil, err
	}
	return parseOutcome(packed)
}

// tryRequest decides the request packed in p: at once when the store needs
// no I/O (no channel), else through the bridge (completions.go). Returns the
// packed outcome.
func (l *Limiter) tryRequest(ctx context.Context, p *packer, cost uint64, nowMs int64, flags C.uint32_t) (string, error) {
	if p.tooLong {
		return "", &Error{Kind: ErrInvalidArgument, Message: "request: a string of 4 GiB or more"}
	}
	if l.pipe != nil && flags&(C.POLYLIMIT_PEEK|C.POLYLIMIT_HAS_NOW_MS) == 0 {
		if packed, err, ok := l.pipe.request(ctx, l, p, cost, flags); ok {
			return packed, err
		}
	}
	var outLen C.size_t
	var owned *C.uint8_t
	var pending *C.polylimit_pending_t
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return "", closedError()
	}
	rc := C.polylimit_limiter_try_check_request(l.ptr,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(p.buf))), C.size_t(len(p.buf)), C.uint64_t(cost), C.int64_t(nowMs), flags,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(p.out))), C.size_t(len(p.out)), &outLen, &owned, &pending, &cerr)
	l.mu.RUnlock()
	switch rc {
	case C.POLYLIMIT_OK:
		if owned != nil {
			packed := C.GoStringN((*C.char)(unsafe.Pointer(owned)), C.int(outLen))
			C.polylimit_bytes_free(owned, outLen)
			return packed, nil
		}
		return string(p.out[:outLen]), nil
	case C.POLYLIMIT_PENDING:
		return l.awaitOutcome(ctx, pending)
	default:
		return "", takeError(rc, cerr)
	}
}

// awaitOutcome waits for a request's packed outcome or for ctx. When ctx
// ends first the decision still completes, and may have charged and taken
// a concurrency slot: its completion token is then settled as "no response"
// (status 0), so a caller that hung up holds no slot until the lease ends
// (as Acquire gives back a cancelled acquire's lease).
func (l *Limiter) awaitOutcome(ctx context.Context, pending *C.polylimit_pending_t) (string, error) {
	ch, err := startPending(pending)
	if err != nil {
		return "", err
	}
	select {
	case rec := <-ch:
		waiterPool.Put(ch)
		return rec.outcome, rec.want(recordOutcome)
	case <-ctx.Done():
		if seen := cancelledRequestSeen; seen != nil {
			seen()
		}
		go func() {
			rec := <-ch
			waiterPool.Put(ch)
			if rec.want(recordOutcome) == nil {
				if token := completionOf(rec.outcome); token != "" {
					_ = l.Complete(context.Background(), token, 0)
				}
			}
			if settled := cancelledRequestSettled; settled != nil {
				settled()
			}
		}()
		return "", ctx.Err()
	}
}

// cancelledRequestSettled, set by tests only, runs once the decision of a
// request whose ctx ended has completed and its token (if any) is settled.
var cancelledRequestSettled func()

// cancelledRequestSeen, set by tests only, runs when a request's ctx ends
// before its decision has completed.
var cancelledRequestSeen func()

// completionOf is the completion token of a packed outcome ("" for none or
// a malformed outcome).
func completionOf(packed string) string {
	r := reader{s: packed}
	token := r.skipOutcome()
	if r.bad {
		return ""
	}
	return token
}

// NoCode is the code of a gRPC call that ended with no status at all (CompleteCall).
const NoCode = -1

// CompleteCall settles a gRPC call (RequestInfo.Kind KindGRPC) once it has
// ended: token is its Outcome's Completion, code the gRPC status code it
// ended with (0 OK; an error that is no status is UNKNOWN, 2, as grpc-go
// sends it), NoCode when it ended with none (counted as failed). A rule's
// count classifies the code as grpc-gateway maps codes to HTTP statuses.
// As Complete otherwise.
func (l *Limiter) CompleteCall(ctx context.Context, token string, code int) error {
	if code < NoCode || code > 0xffff {
		return &ConfigError{Field: "code", Value: fmt.Sprint(code), Message: fmt.Sprintf("code: %d is not a gRPC status code or NoCode", code)}
	}
	return l.complete(ctx, token, func(tokenPtr *C.uint8_t, tokenLen C.size_t, pending **C.polylimit_pending_t, cerr **C.polylimit_error_t) C.int32_t {
		return C.polylimit_limiter_try_complete_call(l.ptr, tokenPtr, tokenLen, C.int32_t(code), pending, cerr)
	})
}

// Complete settles a request after its response: token is its Outcome's
// Completion (set when a rule's count charges only some responses), status
// the response's status (0: no response, counted as failed). The core gives
// back the charges whose rule does not count that status. It never fails
// because the store is down; a malformed token is a *ConfigError naming
// "token". A store call waits on a channel (no OS thread held), or for ctx.
func (l *Limiter) Complete(ctx context.Context, token string, status int) error {
	if status < 0 || status > 0xffff {
		return &ConfigError{Field: "status", Value: fmt.Sprint(status), Message: fmt.Sprintf("status: %d is not an HTTP status", status)}
	}
	return l.complete(ctx, token, func(tokenPtr *C.uint8_t, tokenLen C.size_t, pending **C.polylimit_pending_t, cerr **C.polylimit_error_t) C.int32_t {
		return C.polylimit_limiter_try_complete(l.ptr, tokenPtr, tokenLen, C.uint16_t(status), pending, cerr)
	})
}

// CompleteOptions is what a request's response taught besides its status.
type CompleteOptions struct {
	// Cost, when set, is the request's actual cost (a whole number >= 0),
	// learned from the response (an LLM call's tokens): the difference from
	// its reservation is given back (smaller) or charged whatever the limit
	// (larger), capped at the rules' max_cost. Only charges the status counts
	// are settled this way; the others are given back whole.
	Cost *int64
	// NowMs, when set, is the clock of a charge past the reservation, for
	// tests and simulations (ms since the epoch).
	NowMs *int64
}

// CompleteWith is Complete reporting the request's actual cost (see
// CompleteOptions); a negative cost is a *ConfigError naming "cost".
func (l *Limiter) CompleteWith(ctx context.Context, token string, status int, opts CompleteOptions) error {
	if status < 0 || status > 0xffff {
		return &ConfigError{Field: "status", Value: fmt.Sprint(status), Message: fmt.Sprintf("status: %d is not an HTTP status", status)}
	}
	hasCost, cost, hasNow, nowMs := opts.c()
	return l.complete(ctx, token, func(tokenPtr *C.uint8_t, tokenLen C.size_t, pending **C.polylimit_pending_t, cerr **C.polylimit_error_t) C.int32_t {
		return C.polylimit_limiter_try_complete_cost(l.ptr, tokenPtr, tokenLen, C.uint16_t(status), hasCost, cost,
			hasNow, nowMs, pending, cerr)
	})
}

// CompleteCallWith is CompleteCall reporting the call's actual cost (see
// CompleteOptions), as CompleteWith does for a request.
func (l *Limiter) CompleteCallWith(ctx context.Context, token string, code int, opts CompleteOptions) error {
	if code < NoCode || code > 0xffff {
		return &ConfigError{Field: "code", Value: fmt.Sprint(code), Message: fmt.Sprintf("code: %d is not a gRPC status code or NoCode", code)}
	}
	hasCost, cost, hasNow, nowMs := opts.c()
	return l.complete(ctx, token, func(tokenPtr *C.uint8_t, tokenLen C.size_t, pending **C.polylimit_pending_t, cerr **C.polylimit_error_t) C.int32_t {
		return C.polylimit_limiter_try_complete_call_cost(l.ptr, tokenPtr, tokenLen, C.int32_t(code), hasCost, cost,
			hasNow, nowMs, pending, cerr)
	})
}

// c is opts as the C ABI's completions with a cost take them.
func (opts CompleteOptions) c() (hasCost C.bool, cost C.int64_t, hasNow C.bool, nowMs C.int64_t) {
	if opts.Cost != nil {
		hasCost, cost = true, C.int64_t(*opts.Cost)
	}
	if opts.NowMs != nil {
		hasNow, nowMs = true, C.int64_t(*opts.NowMs)
	}
	return
}

// complete runs one of the C ABI's completions (try, under the read lock)
// and waits for the store when it must.
func (l *Limiter) complete(ctx context.Context, token string,
	try func(*C.uint8_t, C.size_t, **C.polylimit_pending_t, **C.polylimit_error_t) C.int32_t) error {
	var pending *C.polylimit_pending_t
	var cerr *C.polylimit_error_t
	tokenPtr, tokenLen := stringArg(token)
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return closedError()
	}
	rc := try(tokenPtr, tokenLen, &pending, &cerr)
	l.mu.RUnlock()
	runtime.KeepAlive(token)
	switch rc {
	case C.POLYLIMIT_OK:
		return nil
	case C.POLYLIMIT_PENDING:
		_, err := awaitPending(ctx, pending, recordUnit)
		return err
	default:
		return takeError(rc, cerr)
	}
}

// endedStatus is the status a request served by the middleware ends with,
// by the core's rule (polylimit_ended_status, SPEC §6): written is the
// status the handler wrote (0: none), panicked whether it panicked, gone
// whether the client left. 0 is "no response"; a client that left after
// the handler answered is charged as that answer.
func endedStatus(written int, panicked, gone bool) int {
	status := written
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return int(C.polylimit_ended_status(C.uint16_t(status), cbool(written != 0), cbool(panicked), cbool(gone)))
}

func cbool(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

// Reset forgets key under every policy.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var cerr *C.polylimit_error_t
	keyPtr, keyLen := stringArg(key)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return closedError()
	}
	rc := C.polylimit_limiter_reset(l.ptr, keyPtr, keyLen, &cerr)
	runtime.KeepAlive(key)
	if rc != C.POLYLIMIT_OK {
		return takeError(rc, cerr)
	}
	return nil
}

// Reload reads the limiter's rules file (or options) again, ${NAME} expanded
// anew, and swaps the rules at once: checks in flight finish on the old ones,
// and middlewares holding l enforce the new rules from the next request. A
// bad file returns a *ConfigError naming the field and keeps the old rules.
func (l *Limiter) Reload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return closedError()
	}
	rc := C.polylimit_limiter_reload(l.ptr, &cerr)
	if rc != C.POLYLIMIT_OK {
		return takeError(rc, cerr)
	}
	return nil
}

// Metrics returns the limiter's metrics in Prometheus text format.
func (l *Limiter) Metrics() (string, error) {
	var out *C.char
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return "", closedError()
	}
	if rc := C.polylimit_limiter_metrics(l.ptr, &out, &cerr); rc != C.POLYLIMIT_OK {
		return "", takeError(rc, cerr)
	}
	defer C.polylimit_string_free(out)
	return C.GoString(out), nil
}

// Close frees the limiter; later checks fail with ErrClosed. Idempotent, and
// safe while other goroutines check (checks already waiting complete).
func (l *Limiter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sio != nil {
		l.sio.close()
		l.pipe.close()
	}
	if l.ptr != nil {
		l.dropAnomaly()
		C.polylimit_limiter_close(l.ptr)
		C.polylimit_limiter_free(l.ptr)
		l.ptr = nil
		runtime.SetFinalizer(l, nil)
		if freedHook != nil {
			freedHook()
		}
	}
	return nil
}

// freedHook lets the tests see the finalizer free a forgotten limiter.
var freedHook func()
