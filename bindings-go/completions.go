package polylimit

/*
#include "polylimit.h"

// Neither keeps a Go pointer nor calls Go: the batch may live in Go memory.
#cgo noescape polylimit_completions_take
#cgo nocallback polylimit_completions_take
#cgo nocallback polylimit_pending_start_queued
#cgo nocallback polylimit_completions_open
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Operations that wait for the store (a Redis check, request, completion,
// acquire) finish on the core's runtime threads. They reach Go through the
// core's completion queue, not through a callback: a runtime thread pushes
// the result and, when the reader sleeps, writes a byte to a pipe. One
// goroutine (completionLoop) waits on that pipe in Go's network poller (no
// OS thread parked), takes the finished operations in batches and hands
// each to its waiter's channel. A callback from a foreign thread had to find
// a free Go processor before it could run, holding the runtime thread — and
// every other Redis reply behind it — until one was free.
var completions struct {
	once sync.Once
	err  error // the queue could not be opened: the callback path is used

	mu      sync.Mutex
	next    uintptr
	waiters map[uintptr]chan result  // by the ctx given to the core
	alerts  map[uintptr]*anomalySink // OnAnomaly sinks (anomaly.go), same ids
}

// completionBatch is how many finished operations one take returns at most.
const completionBatch = 128

// deliverBy is "queue"; a binary linked with
// -ldflags "-X github.com/polylimit/polylimit/bindings-go.deliverBy=callback"
// delivers through the callback instead (the benchmark's before/after).
var deliverBy = "queue"

// openCompletions opens the queue and starts its reader, once per process.
func openCompletions() error {
	completions.once.Do(func() {
		if deliverBy == "callback" {
			completions.err = fmt.Errorf("deliverBy=callback")
			return
		}
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
			completions.err = err
			return
		}
		// The write end stays open for the life of the process (the core writes to it).
		if rc := C.polylimit_completions_open(C.int32_t(fds[1])); rc != C.POLYLIMIT_OK {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
			completions.err = fmt.Errorf("polylimit_completions_open: status %d", int(rc))
			return
		}
		completions.waiters = make(map[uintptr]chan result)
		completions.alerts = make(map[uintptr]*anomalySink)
		// Non-blocking: os.NewFile reads it through the network poller.
		go completionLoop(os.NewFile(uintptr(fds[0]), "polylimit-completions"))
	})
	return completions.err
}

// completionLoop takes finished operations until the process ends.
func completionLoop(wake *os.File) {
	batch := new([completionBatch]C.polylimit_completion_t)
	chans := make([]chan result, completionBatch)
	sinks := make([]*anomalySink, completionBatch)
	var buf [64]byte
	for {
		var n C.size_t
		C.polylimit_completions_take(&batch[0], completionBatch, &n)
		if n == 0 {
			// Nothing ready: the next finished operation writes a byte.
			if _, err := wake.Read(buf[:]); err != nil {
				// Not expected (the pipe is ours and never closed); take again, without spinning.
				time.Sleep(time.Millisecond)
			}
			continue
		}
		completions.mu.Lock()
		for i := range int(n) {
			id := uintptr(batch[i].ctx)
			if ch, ok := completions.waiters[id]; ok {
				chans[i] = ch
				delete(completions.waiters, id)
			} else {
				// An alert: its sink stays registered until Close.
				sinks[i] = completions.alerts[id]
			}
		}
		completions.mu.Unlock()
		for i := range int(n) {
			// Buffered (1) and sent to once: never blocks, even when the waiter left on ctx.
			if ch := chans[i]; ch != nil {
				ch <- completionResult(&batch[i])
				chans[i] = nil
			} else if s := sinks[i]; s != nil {
				// Copied out here, decoded and delivered on the sink's own goroutine.
				if c := &batch[i]; c.status == C.POLYLIMIT_OK && c.text != nil {
					s.enqueue(C.GoStringN((*C.char)(unsafe.Pointer(c.text)), C.int(c.text_len)))
				}
				sinks[i] = nil
			}
		}
	}
}

// completionResult copies a finished operation out of the core's memory
// (valid until the next take).
func completionResult(c *C.polylimit_completion_t) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r = result{err: &Error{Kind: ErrInternal, Message: fmt.Sprint("completion: ", p)}}
		}
	}()
	if c.status != C.POLYLIMIT_OK {
		return result{err: fromC(c.status, c.error)}
	}
	if c.has_decision {
		r.decision = decisionFromC(&c.decision)
	}
	if c.text != nil {
		r.text = C.GoStringN((*C.char)(unsafe.Pointer(c.text)), C.int(c.text_len))
	}
	return r
}

// waiterPool holds the channels of waits that ended with their result (a
// wait that left on ctx keeps its channel: the result still comes to it).
var waiterPool = sync.Pool{New: func() any { return make(chan result, 1) }}

// startQueued starts pending with its result going to the returned channel.
func startQueued(pending *C.polylimit_pending_t) (chan result, error) {
	ch := waiterPool.Get().(chan result)
	completions.mu.Lock()
	completions.next++
	id := completions.next
	completions.waiters[id] = ch
	completions.mu.Unlock()
	if rc := C.polylimit_pending_start_queued(pending, C.size_t(id)); rc != C.POLYLIMIT_PENDING {
		completions.mu.Lock()
		delete(completions.waiters, id)
		completions.mu.Unlock()
		waiterPool.Put(ch)
		return nil, &Error{Kind: kindOf(int32(rc)), Message: "cannot start a pending check"}
	}
	return ch, nil
}

// addAlertSink registers s under a new ctx for the core; the queue must be open.
func addAlertSink(s *anomalySink) uintptr {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	completions.next++
	completions.alerts[completions.next] = s
	return completions.next
}

// dropAlertSink unregisters the sink of id: alerts still queued for it are dropped.
func dropAlertSink(id uintptr) {
	completions.mu.Lock()
	delete(completions.alerts, id)
	completions.mu.Unlock()
}

// waiting is how many started operations have not delivered their result (tests).
func waiting() int {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return len(completions.waiters)
}

// alertSinks is how many OnAnomaly sinks are registered with the queue (tests).
func alertSinks() int {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return len(completions.alerts)
}
