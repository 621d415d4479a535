package polylimit

/*
#include <stdlib.h>
#include "polylimit.h"

// Neither keeps a Go pointer nor calls Go.
#cgo noescape polylimit_limiter_sans_io_request_start
#cgo nocallback polylimit_limiter_sans_io_request_start
#cgo noescape polylimit_sans_io_request_finish
#cgo nocallback polylimit_sans_io_request_finish
#cgo noescape polylimit_sans_io_request_unanswered
#cgo nocallback polylimit_sans_io_request_unanswered
#cgo nocallback polylimit_sans_io_request_free
*/
import "C"

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/polylimit/polylimit/bindings-go/internal/sansio"
)

// sansPipe is the sans-I/O path of the middleware's requests (CheckRequest,
// Middleware, Gate; capi/src/sans_io_request.rs): the limiter's own
// connections to the Redis server carry the one call the core plans for a
// request, pipelined (many requests in flight on one connection, their
// replies in the order sent), and the core turns each reply into the
// request's packed outcome, with no hop to the core's runtime thread and
// back. Nothing here encodes or decodes Redis.
//
// Per connection: a FIFO of the calls sent, in the order their bytes went
// out; the goroutine whose call finds no write under way writes every call
// queued meanwhile in one Write (a batch); one reader goroutine hands each
// reply to the core (the head of the FIFO's call) and wakes its waiter. The
// reader alone decides the calls of a connection that fails: once its read
// fails (a socket error, or the oldest call silent past the limiter's
// timeout) the connection is dropped, and every call sent on it is decided
// by its policy's on_store_error (the core's unanswered: it may have been
// charged, so it is never sent again); a call whose bytes never went out
// goes the usual way. A request whose ctx ends returns ctx.Err() at once;
// its reply is still read (and counted), keeping the connection in step.
// A request the core does not take this way, one that finds no connection
// yet (dialled in the background) or its connection's queue full goes the
// usual way.
type sansPipe struct {
	addr    string
	timeout time.Duration
	closed  atomic.Bool
	next    atomic.Uint32
	slots   []*pipeSlot

	decided atomic.Uint64 // requests decided from a reply (the tests read it)
	// written, when set (tests), runs after each batch is written.
	written func()
}

// pipeSlot is one connection of the pool, redialled after it fails.
type pipeSlot struct {
	p       *sansPipe
	mu      sync.Mutex
	cur     *pipeConn // nil: not connected
	dialing bool
	retryAt time.Time // no dial before this, after a failed one
}

// pipeConn is one connection and the calls in flight on it; its fields
// are guarded by its slot's mu.
type pipeConn struct {
	s        *pipeSlot
	conn     net.Conn
	fifo     []*pipeCall // sent or queued, oldest first: the next reply is fifo[0]'s
	base     []*pipeCall // fifo's array, reused each time it empties
	out      []byte      // the bytes of the calls queued, not yet taken by a writer
	spare    []byte
	writing  bool // a goroutine is writing a batch
	dropped  bool // no more calls: the reader decides those left
	writeEnd sync.Cond
}

// The states of a call.
const (
	callQueued  = iota // its bytes are in out
	callWriting        // in the batch being written, from off
	callWritten        // sent (all or some of its bytes): it has a reply, or is unanswered
	callUnsent         // its batch's write failed before its bytes: the usual way decides it
)

type pipeCall struct {
	call     *C.polylimit_sans_io_request_t
	state    int
	off      int // its bytes' offset in out (then in its batch)
	deadline time.Time
	done     chan pipeResult
}

// pipeResult is a call's end: the packed outcome, an error, or usual.
type pipeResult struct {
	packed string
	err    error
	usual  bool
}

// Calls in flight per connection beyond which a request goes the usual way.
const pipeMaxInFlight = 256

// Connections in the pool unless sansio.Conns says otherwise.
const pipeConns = 1

// Bytes of one call beyond which it goes the usual way (a key of some kilobytes).
const pipeCallCap = 1024

var pipeCalls = sync.Pool{New: func() any { return &pipeCall{done: make(chan pipeResult, 1)} }}

// newSansPipe is the request path over addr (the core's sans-I/O address).
func newSansPipe(addr string, timeout time.Duration) *sansPipe {
	n := int(sansio.Conns.Load())
	if n <= 0 {
		n = pipeConns
	}
	p := &sansPipe{addr: addr, timeout: timeout}
	for range n {
		p.slots = append(p.slots, &pipeSlot{p: p})
	}
	return p
}

// request decides the request packed in p on a connection; ok false: decide
// it the usual way (p untouched but its out buffer).
func (sp *sansPipe) request(ctx context.Context, l *Limiter, p *packer, cost uint64, flags C.uint32_t) (string, error, bool) {
	if sansio.Off.Load() || sansio.RequestsOff.Load() || sp.closed.Load() {
		return "", nil, false
	}
	s := sp.slots[0]
	if len(sp.slots) > 1 {
		s = sp.slots[sp.next.Add(1)%uint32(len(sp.slots))]
	}
	s.mu.Lock()
	pc := s.cur
	if pc == nil {
		if !s.dialing && !time.Now().Before(s.retryAt) {
			s.dialing = true
			go s.dial()
		}
		s.mu.Unlock()
		return "", nil, false
	}
	full := len(pc.fifo) >= pipeMaxInFlight
	s.mu.Unlock()
	if full {
		return "", nil, false
	}

	if cap(p.out) < pipeCallCap {
		p.out = make([]byte, pipeCallCap)
	}
	out := p.out[:cap(p.out)]
	var call *C.polylimit_sans_io_request_t
	var n C.size_t
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return "", nil, false
	}
	rc := C.polylimit_limiter_sans_io_request_start(l.ptr,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(p.buf))), C.size_t(len(p.buf)), C.uint64_t(cost), 0, flags,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(out))), C.size_t(len(out)), &n, &call, &cerr)
	l.mu.RUnlock()
	runtime.KeepAlive(p)
	if rc != C.POLYLIMIT_OK {
		return "", takeError(rc, cerr), true
	}
	if call == nil {
		return "", nil, false
	}

	c := pipeCalls.Get().(*pipeCall)
	c.call, c.state = call, callQueued
	s.mu.Lock()
	if s.cur != pc || pc.dropped {
		s.mu.Unlock()
		C.polylimit_sans_io_request_free(call)
		c.call = nil
		pipeCalls.Put(c)
		return "", nil, false
	}
	c.deadline = time.Now().Add(sp.timeout)
	if len(pc.fifo) == 0 {
		_ = pc.conn.SetReadDeadline(c.deadline)
	}
	c.off = len(pc.out)
	pc.fifo = append(pc.fifo, c)
	pc.out = append(pc.out, out[:n]...)
	if !pc.writing {
		pc.writing = true
		pc.write() // unlocks s.mu
	} else {
		s.mu.Unlock()
	}

	select {
	case r := <-c.done:
		pipeCalls.Put(c)
		if r.usual {
			return "", nil, false
		}
		return r.packed, r.err, true
	case <-ctx.Done():
		// The reply is still read (and dropped); c is not reused.
		return "", ctx.Err(), true
	}
}

// write writes the queued calls, batch after batch, until none is queued;
// called with s.mu held and writing set, returns with s.mu released.
func (pc *pipeConn) write() {
	s := pc.s
	for len(pc.out) > 0 && !pc.dropped {
		batch := pc.out
		pc.out = pc.spare[:0]
		for i := len(pc.fifo) - 1; i >= 0 && pc.fifo[i].state == callQueued; i-- {
			pc.fifo[i].state = callWriting
		}
		s.mu.Unlock()
		written, err := pc.conn.Write(batch)
		if sp := s.p; sp.written != nil {
			sp.written()
		}
		s.mu.Lock()
		for _, c := range pc.fifo {
			if c.state != callWriting {
				continue
			}
			if err != nil && c.off >= written {
				c.state = callUnsent
			} else {
				c.state = callWritten
			}
		}
		pc.spare = batch[:0]
		if err != nil {
			pc.drop()
		}
	}
	pc.writing = false
	pc.writeEnd.Broadcast()
	s.mu.Unlock()
}

// drop closes the connection (s.mu held): the reader's read fails, and it
// decides the calls left.
func (pc *pipeConn) drop() {
	if !pc.dropped {
		pc.dropped = true
		_ = pc.conn.Close()
		if pc.s.cur == pc {
			pc.s.cur = nil
		}
	}
}

// dial connects the slot (dialing set), then starts its reader.
func (s *pipeSlot) dial() {
	sp := s.p
	d := net.Dialer{Timeout: sp.timeout}
	conn, err := d.Dial("tcp", sp.addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = false
	if err != nil {
		s.retryAt = time.Now().Add(max(sp.timeout, 100*time.Millisecond))
		return
	}
	if sp.closed.Load() {
		_ = conn.Close()
		return
	}
	pc := &pipeConn{s: s, conn: conn, spare: make([]byte, 0, 4096), base: make([]*pipeCall, 0, 128)}
	pc.fifo = pc.base
	pc.writeEnd.L = &s.mu
	s.cur = pc
	go pc.read()
}

// read hands each reply to the core, in order, until the connection fails
// or closes; then decides the calls left.
func (pc *pipeConn) read() {
	s := pc.s
	in := make([]byte, 4096)
	fin := make([]byte, packerOut)
	got := 0
	popped := false
	for {
		m, err := pc.conn.Read(in[got:])
		got += m
		at := 0
		for at < got {
			s.mu.Lock()
			if len(pc.fifo) == 0 {
				// A reply nobody asked for: the connection is out of step.
				pc.drop()
				s.mu.Unlock()
				err = errOutOfStep
				break
			}
			c := pc.fifo[0]
			s.mu.Unlock()
			r, used, whole := finishCall(c.call, in[at:got], fin)
			if !whole {
				break
			}
			at += used
			s.mu.Lock()
			pc.fifo[0] = nil
			pc.fifo = pc.fifo[1:]
			s.mu.Unlock()
			c.call = nil
			if !r.usual && r.err == nil {
				s.p.decided.Add(1)
				sansio.Carried.Add(1)
			}
			c.done <- r
			popped = true
		}
		if popped {
			// The oldest call left bounds the next read.
			popped = false
			s.mu.Lock()
			if len(pc.fifo) > 0 {
				_ = pc.conn.SetReadDeadline(pc.fifo[0].deadline)
			} else {
				pc.fifo = pc.base[:0]
				_ = pc.conn.SetReadDeadline(time.Time{})
				if s.p.closed.Load() {
					pc.drop()
				}
			}
			s.mu.Unlock()
		}
		if at > 0 {
			got = copy(in, in[at:got])
		}
		if got == len(in) {
			in = append(in, make([]byte, len(in))...)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.mu.Lock()
			late := len(pc.fifo) > 0 && !time.Now().Before(pc.fifo[0].deadline)
			if !late && !pc.dropped {
				// An earlier call's deadline: re-arm for the oldest one's.
				if len(pc.fifo) > 0 {
					_ = pc.conn.SetReadDeadline(pc.fifo[0].deadline)
				} else {
					_ = pc.conn.SetReadDeadline(time.Time{})
				}
				s.mu.Unlock()
				continue
			}
			s.mu.Unlock()
		}
		pc.fail(fin)
		return
	}
}

// fail drops the connection and decides every call left on it: sent ones
// by on_store_error (never resent), the others the usual way.
func (pc *pipeConn) fail(fin []byte) {
	s := pc.s
	s.mu.Lock()
	pc.drop()
	for pc.writing {
		pc.writeEnd.Wait()
	}
	left := pc.fifo
	pc.fifo = nil
	pc.out = nil
	if len(left) > 0 && s.cur == nil {
		// The next request dials again (not at once: the server may be down).
		s.retryAt = time.Now().Add(min(sp100, s.p.timeout))
	}
	s.mu.Unlock()
	for _, c := range left {
		call := c.call
		c.call = nil
		if c.state == callWritten {
			c.done <- unansweredCall(call, fin)
		} else {
			C.polylimit_sans_io_request_free(call)
			c.done <- pipeResult{usual: true}
		}
	}
}

const sp100 = 100 * time.Millisecond

var errOutOfStep = errors.New("a reply with no call in flight")

// finishCall hands the received bytes (starting with call's reply) to the
// core; whole false: the reply is not whole yet (call kept). Else call is
// consumed and used bytes were its reply.
func finishCall(call *C.polylimit_sans_io_request_t, in, fin []byte) (r pipeResult, used int, whole bool) {
	var outLen, nUsed C.size_t
	var owned *C.uint8_t
	var state C.int32_t
	var cerr *C.polylimit_error_t
	rc := C.polylimit_sans_io_request_finish(call, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(in))), C.size_t(len(in)),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(fin))), C.size_t(len(fin)), &outLen, &owned, &state, &nUsed, &cerr)
	if rc != C.POLYLIMIT_OK {
		// The call is consumed; its reply was framed, so the connection stays in step.
		return pipeResult{err: takeError(rc, cerr)}, int(nUsed), true
	}
	switch state {
	case C.POLYLIMIT_SANS_IO_INCOMPLETE:
		return pipeResult{}, 0, false
	case C.POLYLIMIT_SANS_IO_DECIDED:
		return pipeResult{packed: packedOut(fin, outLen, owned)}, int(nUsed), true
	default:
		return pipeResult{usual: true}, int(nUsed), true
	}
}

// unansweredCall decides call, sent, that got no reply (on_store_error).
func unansweredCall(call *C.polylimit_sans_io_request_t, fin []byte) pipeResult {
	var outLen C.size_t
	var owned *C.uint8_t
	var state C.int32_t
	var cerr *C.polylimit_error_t
	rc := C.polylimit_sans_io_request_unanswered(call, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(fin))), C.size_t(len(fin)),
		&outLen, &owned, &state, &cerr)
	if rc != C.POLYLIMIT_OK {
		return pipeResult{err: takeError(rc, cerr)}
	}
	if state != C.POLYLIMIT_SANS_IO_DECIDED {
		return pipeResult{usual: true}
	}
	return pipeResult{packed: packedOut(fin, outLen, owned)}
}

// packedOut is the packed outcome written to fin (outLen bytes) or owned.
func packedOut(fin []byte, outLen C.size_t, owned *C.uint8_t) string {
	if owned != nil {
		packed := C.GoStringN((*C.char)(unsafe.Pointer(owned)), C.int(outLen))
		C.polylimit_bytes_free(owned, outLen)
		return packed
	}
	return string(fin[:outLen])
}

// close: no more requests; each connection closes once its calls in flight
// have their replies (or now, when idle).
func (sp *sansPipe) close() {
	sp.closed.Store(true)
	for _, s := range sp.slots {
		s.mu.Lock()
		if pc := s.cur; pc != nil && len(pc.fifo) == 0 {
			pc.drop()
		}
		s.mu.Unlock()
	}
}
