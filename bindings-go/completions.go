package polylimit

/*
#include "polylimit.h"

#cgo noescape polylimit_completions_take
#cgo nocallback polylimit_completions_take
*/
import "C"

import (
	"os"
	"runtime/cgo"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Pending operations complete into a queue in the library, which signals a
// socket; one goroutine waits on that socket in Go's netpoller (no OS thread
// parked), takes the completions in batches and hands each to its waiter's
// channel. Compared with a callback per completion from a runtime thread,
// this costs Go one wake-up per batch instead of a foreign-thread callback
// and a scheduler hand-off per operation.
var completions struct {
	once sync.Once
	err  error
}

// queueCompletions starts the completion goroutine once; false when the
// library has no completion socket (the callback path is used then).
func queueCompletions() bool {
	completions.once.Do(func() {
		var fd C.int32_t
		var cerr *C.polylimit_error_t
		if rc := C.polylimit_completions_fd(&fd, &cerr); rc != C.POLYLIMIT_OK {
			completions.err = takeError(rc, cerr)
			return
		}
		// A duplicate: the library keeps its descriptor, os.File owns this one.
		dup, err := syscall.Dup(int(fd))
		if err != nil {
			completions.err = err
			return
		}
		go takeCompletions(os.NewFile(uintptr(dup), "polylimit-completions"))
	})
	return completions.err == nil
}

const completionBatch = 64

func takeCompletions(f *os.File) {
	wake := make([]byte, 64)
	batch := make([]C.polylimit_completion_t, completionBatch)
	for {
		if _, err := f.Read(wake); err != nil {
			// Not expected on a socket the library keeps open; do not spin.
			time.Sleep(time.Millisecond)
		}
		for {
			var n C.size_t
			if rc := C.polylimit_completions_take(&batch[0], C.size_t(len(batch)), &n); rc != C.POLYLIMIT_OK {
				break
			}
			for i := range int(n) {
				complete(&batch[i])
			}
			if int(n) < len(batch) {
				break
			}
		}
	}
}

// complete hands one completion to its waiter and frees what the library lent.
func complete(c *C.polylimit_completion_t) {
	h := cgo.Handle(c.ctx)
	ch := h.Value().(chan result)
	h.Delete()
	var r result
	switch {
	case c.status != C.POLYLIMIT_OK:
		r.err = takeError(c.status, c.error)
	case c.bytes != nil:
		r.text = C.GoStringN((*C.char)(unsafe.Pointer(c.bytes)), C.int(c.bytes_len))
		C.polylimit_bytes_free(c.bytes, c.bytes_len)
	default:
		r.decision = decisionFromC(&c.decision)
	}
	ch <- r // buffered: never blocks
}
