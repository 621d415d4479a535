package polylimit

/*
#cgo CFLAGS: -I${SRCDIR}/capi/include
#include "polylimit.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// Sentinel errors, one per core error kind; match them with errors.Is.
var (
	// ErrConfig: a configuration or argument value is wrong (see *ConfigError).
	ErrConfig = errors.New("polylimit: config error")
	// ErrStoreUnavailable: the store could not be reached (checks answer by
	// on_store_error instead; only reset reports it).
	ErrStoreUnavailable = errors.New("polylimit: store unavailable")
	// ErrStore: the store answered with an error for one key.
	ErrStore = errors.New("polylimit: store error")
	// ErrClosed: the limiter was closed.
	ErrClosed = errors.New("polylimit: limiter is closed")
	// ErrInternal: a bug in polylimit.
	ErrInternal = errors.New("polylimit: internal error")
	// ErrInvalidArgument: an argument the C ABI cannot accept (invalid UTF-8).
	ErrInvalidArgument = errors.New("polylimit: invalid argument")
	// ErrBreakerOpen: CircuitBreaker.Call did not run the call.
	ErrBreakerOpen = errors.New("polylimit: circuit breaker is open")
)

// Error is an error from the core: a kind (one of the sentinels) and a
// message; Key is the store key an ErrStore concerns.
type Error struct {
	Kind    error  // the sentinel: ErrStore, ErrStoreUnavailable, ErrClosed, ErrInternal, …
	Message string // what went wrong
	Key     string // the store key an ErrStore concerns
}

// Error returns the message, prefixed with "polylimit: ".
func (e *Error) Error() string { return "polylimit: " + e.Message }

// Unwrap returns the kind, so errors.Is(err, ErrClosed) works.
func (e *Error) Unwrap() error { return e.Kind }

// ConfigError is a bad configuration value: Field is its path as written,
// in Options' names (Policy.Rate, IPv6Subnet) or a rules document's
// (policies.api.rate); Value is what was given (JSON syntax).
type ConfigError struct {
	Field   string // the option at fault, as written (Policy.Rate)
	Value   string // the value given, in JSON syntax
	Message string // the whole message, naming the field and the value
}

// Error returns the message, which names the field and value at fault, prefixed with "polylimit: ".
func (e *ConfigError) Error() string { return "polylimit: " + e.Message }

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// sentinelOf is the sentinel of each of the core's error kind names.
var sentinelOf = map[string]error{
	"config":            ErrConfig,
	"store_unavailable": ErrStoreUnavailable,
	"store":             ErrStore,
	"closed":            ErrClosed,
	"internal":          ErrInternal,
}

// errorKind is one of the core's error kinds: its name and the status the C
// library returns for it.
type errorKind struct {
	name   string
	status int32
}

// errorKinds are the core's error kinds, read from the C library once
// (TestEveryErrorKindHasItsSentinel checks that each has its own sentinel).
var errorKinds = func() []errorKind {
	var kinds []errorKind
	for i := 0; ; i++ {
		status := C.polylimit_error_kind_status(C.size_t(i))
		if status == C.POLYLIMIT_OK {
			return kinds
		}
		kinds = append(kinds, errorKind{C.GoString(C.polylimit_status_name(status)), int32(status)})
	}
}()

// kindOf is the sentinel of a status: its error kind's, ErrInvalidArgument,
// or ErrInternal for a status this package does not know.
func kindOf(code int32) error {
	if code == C.POLYLIMIT_INVALID_ARGUMENT {
		return ErrInvalidArgument
	}
	for _, k := range errorKinds {
		if k.status == code {
			if sentinel := sentinelOf[k.name]; sentinel != nil {
				return sentinel
			}
		}
	}
	return ErrInternal
}

// fromC converts a borrowed C error; it does not free it.
func fromC(code C.int32_t, e *C.polylimit_error_t) error {
	if e == nil {
		return &Error{Kind: kindOf(int32(code)), Message: fmt.Sprintf("status %d", int(code))}
	}
	message := C.GoString(e.message)
	if e.code == C.POLYLIMIT_CONFIG && e.field != nil {
		return &ConfigError{Field: C.GoString(e.field), Value: C.GoString(e.value), Message: message}
	}
	var key string
	if e.key != nil {
		key = C.GoString(e.key)
	}
	return &Error{Kind: kindOf(int32(e.code)), Message: message, Key: key}
}

// takeError converts and frees an owned C error.
func takeError(code C.int32_t, e *C.polylimit_error_t) error {
	err := fromC(code, e)
	C.polylimit_error_free(e)
	return err
}
