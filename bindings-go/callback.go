package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
)

// polylimitGoDone is the C callback of a pending operation when the
// completion queue could not be opened (completions.go; deliverBy=callback):
// it runs on a polylimit runtime thread and hands the result to the waiting
// goroutine through the buffered channel behind the cgo.Handle.
//
//export polylimitGoDone
func polylimitGoDone(ctx C.size_t, status C.int32_t, d *C.polylimit_decision_t, text *C.char, n C.size_t, e *C.polylimit_error_t) {
	h := cgo.Handle(ctx)
	ch := h.Value().(chan result)
	h.Delete()
	var r result
	defer func() {
		// Never unwind into Rust: a failure here becomes the waiter's error.
		if p := recover(); p != nil {
			r = result{err: &Error{Kind: ErrInternal, Message: fmt.Sprint("callback panic: ", p)}}
		}
		ch <- r
	}()
	switch {
	case status != C.POLYLIMIT_OK:
		r.err = fromC(status, e)
	default:
		// An acquire sets both: its decision and its leases.
		if d != nil {
			r.decision = decisionFromC(d)
		}
		if text != nil {
			r.text = C.GoStringN(text, C.int(n))
		}
	}
}
