package polylimit

/*
#include <stdlib.h>
#include "polylimit.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"time"
	"unsafe"
)

// Override is a per-key override to set: Rate (and Burst) replace Policy's
// numbers for one key, in the store, for every process and language that
// checks it, until removed or until TTL ends. The algorithm stays the
// policy's. For a rules-file limiter the key is the one its rules compose
// ("user=acme", "ip=203.0.113.7|route=/x").
type Override struct {
	// Policy is the policy's name; empty on a limiter with one policy.
	Policy string
	// Rate is "<n>/<duration>", as a policy's rate. Required.
	Rate string
	// Burst is the bucket capacity (not for window algorithms); 0: the rate's count.
	Burst uint64
	// TTL is how long it lasts; 0: until removed.
	TTL time.Duration
	// NowMs, for tests and simulations, is the time it is set at (a TTL counts from it); 0: the store's clock.
	NowMs int64
}

// OverrideInfo is a per-key override in force.
type OverrideInfo struct {
	Policy string `json:"policy"` // the policy's name
	Key    string `json:"key"`    // the key
	Rate   string `json:"rate"`   // the key's rate, "<n>/<duration>"
	Burst  uint64 `json:"burst"`  // its bucket capacity (the limit per window for window algorithms)
	Limit  uint64 `json:"limit"`  // the Limit of its decisions (as Burst)
	// ExpiresAtMs is when it ends (ms since the epoch, the store's clock); 0: never.
	ExpiresAtMs int64 `json:"expires_at_ms"`
}

// SetOverride sets a per-key override and returns it as stored. Bad input is
// a *ConfigError naming the field.
func (l *Limiter) SetOverride(ctx context.Context, key string, o Override) (*OverrideInfo, error) {
	var info *OverrideInfo
	err := l.override(ctx, 0, key, o, &info)
	return info, err
}

// GetOverride returns the override in force for key under policy (empty: the
// limiter's one policy), or nil.
func (l *Limiter) GetOverride(ctx context.Context, key, policy string) (*OverrideInfo, error) {
	var info *OverrideInfo
	err := l.override(ctx, 1, key, Override{Policy: policy}, &info)
	return info, err
}

// RemoveOverride removes the override of key under policy (empty: the
// limiter's one policy); it reports whether one was in force.
func (l *Limiter) RemoveOverride(ctx context.Context, key, policy string) (bool, error) {
	var removed bool
	err := l.override(ctx, 2, key, Override{Policy: policy}, &removed)
	return removed, err
}

// LimitInfo is a policy-wide limit in force.
type LimitInfo struct {
	Policy string `json:"policy"` // the policy's name (every key of it)
	Rate   string `json:"rate"`   // the policy's rate while it is in force, "<n>/<duration>"
	Burst  uint64 `json:"burst"`  // its bucket capacity (the limit per window for window algorithms)
	Limit  uint64 `json:"limit"`  // the Limit of its decisions (as Burst)
	// ExpiresAtMs is when it ends (ms since the epoch, the store's clock); 0: never.
	ExpiresAtMs int64 `json:"expires_at_ms"`
}

// SetLimit sets a policy-wide limit: every key of o.Policy (empty: the
// limiter's one policy) is decided under o.Rate and o.Burst instead of the
// policy's numbers, by every process on the store, until removed or until
// o.TTL ends. A per-key override still wins. Needs Overrides: true. Bad
// input is a *ConfigError naming the field.
func (l *Limiter) SetLimit(ctx context.Context, o Override) (*LimitInfo, error) {
	var info *LimitInfo
	err := l.override(ctx, 3, "", o, &info)
	return info, err
}

// GetLimit returns the policy-wide limit in force for policy (empty: the
// limiter's one policy), or nil.
func (l *Limiter) GetLimit(ctx context.Context, policy string) (*LimitInfo, error) {
	var info *LimitInfo
	err := l.override(ctx, 4, "", Override{Policy: policy}, &info)
	return info, err
}

// RemoveLimit removes the policy-wide limit of policy (empty: the limiter's
// one policy); it reports whether one was in force.
func (l *Limiter) RemoveLimit(ctx context.Context, policy string) (bool, error) {
	var removed bool
	err := l.override(ctx, 5, "", Override{Policy: policy}, &removed)
	return removed, err
}

func (l *Limiter) override(ctx context.Context, op int, key string, o Override, result any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	spec, err := json.Marshal(o)
	if err != nil {
		return err
	}
	var out *C.char
	var cerr *C.polylimit_error_t
	keyPtr, keyLen := stringArg(key)
	specPtr := (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(spec)))
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return closedError()
	}
	rc := C.polylimit_limiter_override(l.ptr, C.int32_t(op), keyPtr, keyLen, specPtr, C.size_t(len(spec)), &out, &cerr)
	runtime.KeepAlive(key)
	runtime.KeepAlive(spec)
	if rc != C.POLYLIMIT_OK {
		return takeError(rc, cerr)
	}
	defer C.polylimit_string_free(out)
	return json.Unmarshal([]byte(C.GoString(out)), result)
}
