package client

/*
#cgo CFLAGS: -I${SRCDIR}/../capi/include
#include <stdlib.h>
#include "polylimit.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"time"
	"unsafe"
)

// The Retry-After rules are the core's (core/src/client.rs), through the C
// ABI: this file only maps Go's values onto it.

// coreOptions holds t's options as the C ABI reads them; the pinner keeps
// the statuses' backing array in place while C reads it.
type coreOptions struct {
	c      C.polylimit_retry_options_t
	pinner runtime.Pinner
}

func (t *RetryTransport) coreOptions() *coreOptions {
	o := &coreOptions{c: C.polylimit_retry_options_t{
		max_retries: C.int64_t(t.MaxRetries),
		max_wait_ns: C.int64_t(t.MaxWait),
		budget_ns:   C.int64_t(t.Budget),
		jitter:      C.double(t.Jitter),

		retry_non_idempotent: C.bool(t.RetryNonIdempotent),
	}}
	if t.Statuses != nil {
		o.c.statuses_set = true
		if len(t.Statuses) > 0 {
			list := make([]int64, len(t.Statuses))
			for i, s := range t.Statuses {
				list[i] = int64(s)
			}
			o.pinner.Pin(&list[0])
			o.c.statuses = (*C.int64_t)(unsafe.Pointer(&list[0]))
			o.c.statuses_len = C.size_t(len(list))
		}
	}
	return o
}

func (o *coreOptions) release() { o.pinner.Unpin() }

// coreDefaults are the core's defaults of the fields.
func coreDefaults() (maxRetries int, maxWait, budget time.Duration, jitter float64, statuses []int) {
	var o C.polylimit_retry_options_t
	var cerr *C.polylimit_error_t
	if err := coreError(C.polylimit_retry_defaults(&o, &cerr), cerr); err != nil {
		panic(err) // only a broken build: the core always has its defaults
	}
	for _, s := range unsafe.Slice((*int64)(unsafe.Pointer(o.statuses)), int(o.statuses_len)) {
		statuses = append(statuses, int(s))
	}
	return int(o.max_retries), time.Duration(o.max_wait_ns), time.Duration(o.budget_ns), float64(o.jitter), statuses
}

// coreError is the Go error of a C ABI error (freed here), nil for none.
func coreError(status C.int32_t, cerr *C.polylimit_error_t) error {
	if status == C.POLYLIMIT_OK {
		return nil
	}
	if cerr == nil {
		return errors.New("polylimit: client: status " + C.GoString(C.polylimit_status_name(status)))
	}
	defer C.polylimit_error_free(cerr)
	return errors.New(C.GoString(cerr.message))
}

// check is the core's verdict on t's options: an error naming the field and
// value (`Jitter: 2 is not a fraction from 0 to 1`), or nil.
func (t *RetryTransport) check() error {
	o := t.coreOptions()
	defer o.release()
	var cerr *C.polylimit_error_t
	return coreError(C.polylimit_retry_check(&o.c, &cerr), cerr)
}

// header is a header value for the C ABI: the bytes, or NULL when empty.
func header(value string) (*C.uint8_t, C.size_t) {
	if value == "" {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(value))), C.size_t(len(value))
}

func parseRetryAfter(value string, present bool, now time.Time) (time.Duration, bool) {
	ptr, n := header(value)
	var found C.bool
	var ms C.uint64_t
	if C.polylimit_parse_retry_after(ptr, n, C.bool(present), C.int64_t(now.UnixMilli()), &found, &ms, nil) != C.POLYLIMIT_OK {
		return 0, false
	}
	return msDuration(uint64(ms)), bool(found)
}

func msDuration(ms uint64) time.Duration {
	if ms > uint64(1<<63-1)/uint64(time.Millisecond) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

// coreWait is the core's wait before the next attempt, or false to give up.
func (t *RetryTransport) coreWait(method string, status int, retryAfter string, retries int, started, now time.Time, random float64) (time.Duration, bool, error) {
	o := t.coreOptions()
	defer o.release()
	ptr, n := header(retryAfter)
	mptr, mn := header(method)
	var retry C.bool
	var ms C.uint64_t
	var cerr *C.polylimit_error_t
	status32 := C.polylimit_retry_wait(&o.c, mptr, mn, C.int64_t(status), ptr, n, C.bool(retryAfter != ""), C.int64_t(retries),
		C.int64_t(started.UnixMilli()), C.int64_t(now.UnixMilli()), C.double(random), &retry, &ms, &cerr)
	if err := coreError(status32, cerr); err != nil {
		return 0, false, err
	}
	return msDuration(uint64(ms)), bool(retry), nil
}
