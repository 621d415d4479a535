package polylimit

/*
#include "polylimit.h"

// Neither keeps a Go pointer nor calls Go.
#cgo noescape polylimit_bridge_take
#cgo nocallback polylimit_bridge_take
#cgo nocallback polylimit_pending_submit
#cgo nocallback polylimit_bridge_open
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
// acquire, release) finish on the core's runtime, which hands them back
// through its completion bridge as packed records (wire.go reads them). The
// bridge writes a byte to a pipe when records are ready and the reader
// sleeps; one goroutine (completionLoop) waits on that pipe in Go's network
// poller (no OS thread parked), takes the records in batches and hands each
// to its waiter's channel. No runtime thread ever calls into Go: a callback
// from a foreign thread has to find a free Go processor first, holding the
// runtime thread (and every Redis reply behind it) until one is free.
var completions struct {
	once   sync.Once
	err    error                 // the pipe could not be made: operations that wait fail
	bridge *C.polylimit_bridge_t // for the life of the process

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]chan record  // by the ctx given to the bridge
	alerts  map[uint64]*anomalySink // OnAnomaly sinks (anomaly.go), same ids
}

// openCompletions opens the bridge and starts its reader, once per process.
func openCompletions() error {
	completions.once.Do(func() {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
			completions.err = &Error{Kind: ErrInternal, Message: "completion pipe: " + err.Error()}
			return
		}
		// The write end stays open for the life of the process (the core writes to it).
		completions.bridge = C.polylimit_bridge_open(C.int32_t(fds[1]))
		if completions.bridge == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
			completions.err = &Error{Kind: ErrInternal, Message: "cannot open the completion bridge"}
			return
		}
		completions.waiters = make(map[uint64]chan record)
		completions.alerts = make(map[uint64]*anomalySink)
		// Non-blocking: os.NewFile reads it through the network poller.
		go completionLoop(os.NewFile(uintptr(fds[0]), "polylimit-completions"))
	})
	return completions.err
}

// completionLoop takes finished operations until the process ends.
func completionLoop(wake *os.File) {
	var buf [64]byte
	var recs []record
	for {
		var records *C.uint8_t
		var n C.size_t
		count := C.polylimit_bridge_take(completions.bridge, &records, &n)
		if count == 0 {
			// Nothing ready: the next finished operation writes a byte.
			if _, err := wake.Read(buf[:]); err != nil {
				// Not expected (the pipe is ours and never closed); take again, without spinning.
				time.Sleep(time.Millisecond)
			}
			continue
		}
		// One copy of the batch, lent until the next take; the records' strings share it.
		recs = readBatch(C.GoStringN((*C.char)(unsafe.Pointer(records)), C.int(n)), int(count), recs[:0])
		deliver(recs)
		clear(recs)
	}
}

// readBatch appends the count records of batch to recs. A malformed record
// (a bug) ends the batch: its waiter gets an internal error.
func readBatch(batch string, count int, recs []record) []record {
	r := reader{s: batch}
	for range count {
		rec := r.record()
		if r.bad {
			rec = record{ctx: rec.ctx, err: &Error{Kind: ErrInternal, Message: "completion: malformed record"}}
			return append(recs, rec)
		}
		recs = append(recs, rec)
	}
	return recs
}

// deliver hands each record to its waiter, or its alert to its sink.
func deliver(recs []record) {
	type to struct {
		ch   chan record
		sink *anomalySink
	}
	var stack [64]to
	dest := stack[:0]
	completions.mu.Lock()
	for i := range recs {
		id := recs[i].ctx
		if ch, ok := completions.waiters[id]; ok {
			delete(completions.waiters, id)
			dest = append(dest, to{ch: ch})
		} else {
			// An alert: its sink stays registered until Close (nil once dropped).
			dest = append(dest, to{sink: completions.alerts[id]})
		}
	}
	completions.mu.Unlock()
	for i, d := range dest {
		switch {
		case d.ch != nil:
			// Buffered (1) and sent to once: never blocks, even when the waiter left on ctx.
			d.ch <- recs[i]
		case d.sink != nil && recs[i].kind == recordJSON:
			d.sink.enqueue(recs[i].json)
		}
	}
}

// waiterPool holds the channels of waits that ended with their result (a
// wait that left on ctx keeps its channel: the result still comes to it).
var waiterPool = sync.Pool{New: func() any { return make(chan record, 1) }}

// startPending submits pending to the bridge, its record going to the
// returned channel (pooled: put it back in waiterPool once read).
func startPending(pending *C.polylimit_pending_t) (chan record, error) {
	if err := openCompletions(); err != nil {
		C.polylimit_pending_free(pending)
		return nil, err
	}
	ch := waiterPool.Get().(chan record)
	completions.mu.Lock()
	completions.next++
	id := completions.next
	completions.waiters[id] = ch
	completions.mu.Unlock()
	if rc := C.polylimit_pending_submit(pending, completions.bridge, C.uint64_t(id)); rc != C.POLYLIMIT_PENDING {
		completions.mu.Lock()
		delete(completions.waiters, id)
		completions.mu.Unlock()
		waiterPool.Put(ch)
		return nil, &Error{Kind: kindOf(int32(rc)), Message: "cannot submit a pending operation"}
	}
	return ch, nil
}

// addAlertSink registers s under a new ctx for the bridge.
func addAlertSink(s *anomalySink) (uint64, error) {
	if err := openCompletions(); err != nil {
		return 0, err
	}
	completions.mu.Lock()
	defer completions.mu.Unlock()
	completions.next++
	completions.alerts[completions.next] = s
	return completions.next, nil
}

// dropAlertSink unregisters the sink of id: alerts still queued for it are dropped.
func dropAlertSink(id uint64) {
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

// alertSinks is how many OnAnomaly sinks are registered (tests).
func alertSinks() int {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return len(completions.alerts)
}

// want is the record's error, or an internal one when it is not of kind
// (a bug: each operation answers one kind).
func (rec *record) want(kind uint8) error {
	if rec.err != nil {
		return rec.err
	}
	if rec.kind != kind {
		return &Error{Kind: ErrInternal, Message: fmt.Sprintf("completion: a record of kind %d, want %d", rec.kind, kind)}
	}
	return nil
}
