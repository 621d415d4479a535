package polylimit

/*
#include <stdlib.h>
#include "polylimit.h"

// Neither keeps a Go pointer nor calls Go.
#cgo noescape polylimit_limiter_sans_io_start
#cgo nocallback polylimit_limiter_sans_io_start
#cgo noescape polylimit_sans_io_finish
#cgo nocallback polylimit_sans_io_finish
#cgo noescape polylimit_sans_io_unanswered
#cgo nocallback polylimit_sans_io_unanswered
#cgo nocallback polylimit_sans_io_call_free
*/
import "C"

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/polylimit/polylimit/bindings-go/internal/sansio"
)

// sansIo is the sans-I/O path of Check (capi/src/sans_io.rs): the limiter's
// own connection to the Redis server carries the exact call the core
// encodes, and the core decodes the reply, with no hop to the core's runtime
// thread and back (the latency of a lone check). One check uses the
// connection at a time, and only while no other check waits for the store
// the usual way (under load the bridge carries the calls of a turn
// together, for less CPU per decision); a check that finds it busy, not
// connected yet, or that the core does not cover (several policies, a
// breaker not closed, a clock sample due, …: the core decides) goes the
// usual way. Nothing here encodes or decodes Redis.
//
// A check sent whose connection fails or stays silent past the limiter's
// timeout is decided by its policy's on_store_error (the core's
// polylimit_sans_io_unanswered: it may have been charged, so it is never
// sent again) and the connection is dropped; the next check dials again,
// in the background. A check whose ctx ends after it was sent returns
// ctx.Err() at once while a goroutine reads its reply (the call is
// counted, as the usual path's would be), keeping the connection in step.
type sansIo struct {
	addr    string
	timeout time.Duration

	mu      sync.Mutex // held by the one check (or dial) using conn, out and in
	closed  atomic.Bool
	conn    net.Conn
	retryAt time.Time // no dial before this, after a failed one
	out     []byte    // the call's bytes
	in      []byte    // the reply's bytes

	decided atomic.Uint64 // checks decided from a reply on the connection (the tests read it)
	sent    func()        // when set (tests), runs once a check's bytes are written
}

// A call's bytes larger than this go the usual way (a key of some kilobytes).
const sansIoOutCap = 4096

// newSansIo is ptr's sans-I/O path, or nil when the core gives no address
// (not Redis, Cluster, Sentinel, TLS, AUTH or SELECT in the URL).
func newSansIo(ptr *C.polylimit_limiter_t) *sansIo {
	var host *C.char
	var port C.uint16_t
	var timeoutMs C.uint64_t
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_limiter_sans_io_address(ptr, &host, &port, &timeoutMs, &cerr); rc != C.POLYLIMIT_OK {
		C.polylimit_error_free(cerr)
		return nil
	}
	if host == nil {
		return nil
	}
	defer C.polylimit_string_free(host)
	return &sansIo{
		addr:    net.JoinHostPort(C.GoString(host), strconv.Itoa(int(port))),
		timeout: time.Duration(timeoutMs) * time.Millisecond,
		out:     make([]byte, sansIoOutCap),
		in:      make([]byte, 512),
	}
}

// check decides key on the connection; ok false: decide it the usual way.
func (s *sansIo) check(ctx context.Context, l *Limiter, key string, cost uint64) (d Decision, err error, ok bool) {
	if sansio.Off.Load() || s.closed.Load() || !s.mu.TryLock() {
		return Decision{}, nil, false
	}
	conn := s.conn
	if conn != nil && connCheck(conn) != nil {
		// Closed by the server (a restart, an idle timeout) since the last check.
		s.conn = nil
		_ = conn.Close()
		conn = nil
	}
	if conn == nil {
		if !time.Now().Before(s.retryAt) && !s.closed.Load() {
			go s.dial() // holds mu until connected
			return Decision{}, nil, false
		}
		s.release()
		return Decision{}, nil, false
	}
	keyPtr, keyLen := stringArg(key)
	var call *C.polylimit_sans_io_call_t
	var n C.size_t
	var cerr *C.polylimit_error_t
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		s.release()
		return Decision{}, nil, false
	}
	rc := C.polylimit_limiter_sans_io_start(l.ptr, keyPtr, keyLen, C.uint64_t(cost), -1,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(s.out))), C.size_t(len(s.out)), &n, &call, &cerr)
	l.mu.RUnlock()
	runtime.KeepAlive(key)
	if rc != C.POLYLIMIT_OK {
		s.release()
		return Decision{}, takeError(rc, cerr), true
	}
	if call == nil {
		s.release()
		return Decision{}, nil, false
	}
	return s.exchange(ctx, conn, call, int(n))
}

// long ago: a deadline that has passed.
var longAgo = time.Unix(1, 0)

// exchange sends call's n bytes and reads its reply; s.mu is held (and
// released here, or by the goroutine that reads the reply of a check whose
// ctx ended).
func (s *sansIo) exchange(ctx context.Context, conn net.Conn, call *C.polylimit_sans_io_call_t, n int) (Decision, error, bool) {
	deadline := time.Now().Add(s.timeout)
	limit := deadline
	ctxDeadline, hasCtxDeadline := ctx.Deadline()
	if hasCtxDeadline && ctxDeadline.Before(limit) {
		limit = ctxDeadline
	}
	_ = conn.SetDeadline(limit)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(longAgo) })
	}
	written, err := conn.Write(s.out[:n])
	if err != nil {
		if stop != nil {
			stop()
		}
		s.dropConn()
		if written == 0 {
			// Nothing went out: the usual path decides it.
			C.polylimit_sans_io_call_free(call)
			s.release()
			return Decision{}, nil, false
		}
		return s.unanswered(call)
	}
	if s.sent != nil {
		s.sent()
	}
	got := 0
	for {
		m, err := conn.Read(s.in[got:])
		got += m
		if m > 0 {
			if d, err, ok, done := s.finish(call, got); done {
				if stop != nil {
					stop()
				}
				s.release()
				return d, err, ok
			}
		}
		if err == nil {
			continue
		}
		now := time.Now()
		ctxEnded := ctx.Err() != nil || (hasCtxDeadline && !now.Before(ctxDeadline))
		if errors.Is(err, os.ErrDeadlineExceeded) && ctxEnded && now.Before(deadline) {
			// The caller's ctx ended, not the call's time: the reply is still read.
			if stop != nil {
				stop()
			}
			go s.drain(conn, call, got, deadline)
			if err := ctx.Err(); err != nil {
				return Decision{}, err, true
			}
			return Decision{}, context.DeadlineExceeded, true
		}
		if stop != nil {
			stop()
		}
		s.dropConn()
		return s.unanswered(call)
	}
}

// drain reads the reply of a check whose caller left (its decision is
// counted, not returned), then releases s.mu.
func (s *sansIo) drain(conn net.Conn, call *C.polylimit_sans_io_call_t, got int, deadline time.Time) {
	for {
		// Re-armed at each turn: ctx's AfterFunc may still move it after it was stopped.
		_ = conn.SetReadDeadline(deadline)
		m, err := conn.Read(s.in[got:])
		got += m
		if m > 0 {
			if _, _, _, done := s.finish(call, got); done {
				s.release()
				return
			}
		}
		if err == nil || (errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline)) {
			continue
		}
		s.dropConn()
		_, _, _ = s.unanswered(call)
		return
	}
}

// finish hands the got bytes received to the core; done false: the reply is
// not whole yet (s.in grows when full). done true: call is consumed, and ok
// false means decide it the usual way.
func (s *sansIo) finish(call *C.polylimit_sans_io_call_t, got int) (d Decision, err error, ok, done bool) {
	var out C.polylimit_decision_t
	var state C.int32_t
	var used C.size_t
	var cerr *C.polylimit_error_t
	rc := C.polylimit_sans_io_finish(call, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(s.in))), C.size_t(got),
		&out, &state, &used, &cerr)
	if rc != C.POLYLIMIT_OK {
		s.dropConn()
		return Decision{}, takeError(rc, cerr), true, true
	}
	switch state {
	case C.POLYLIMIT_SANS_IO_INCOMPLETE:
		if got == len(s.in) {
			s.in = append(s.in, make([]byte, len(s.in))...)
		}
		return Decision{}, nil, false, false
	case C.POLYLIMIT_SANS_IO_DECIDED:
		if int(used) != got {
			// More than one reply: the connection is out of step.
			s.dropConn()
		}
		s.decided.Add(1)
		sansio.Carried.Add(1)
		return decisionFromC(&out), nil, true, true
	default:
		return Decision{}, nil, false, true
	}
}

// unanswered decides call, sent, that got no reply (on_store_error), and
// releases s.mu.
func (s *sansIo) unanswered(call *C.polylimit_sans_io_call_t) (Decision, error, bool) {
	defer s.release()
	var out C.polylimit_decision_t
	var state C.int32_t
	var cerr *C.polylimit_error_t
	if rc := C.polylimit_sans_io_unanswered(call, &out, &state, &cerr); rc != C.POLYLIMIT_OK {
		return Decision{}, takeError(rc, cerr), true
	}
	if state != C.POLYLIMIT_SANS_IO_DECIDED {
		return Decision{}, nil, false
	}
	return decisionFromC(&out), nil, true
}

// dial connects, holding s.mu (taken by the check that found no connection).
func (s *sansIo) dial() {
	d := net.Dialer{Timeout: s.timeout}
	conn, err := d.Dial("tcp", s.addr)
	if err != nil {
		s.retryAt = time.Now().Add(max(s.timeout, 100*time.Millisecond))
	} else {
		s.conn = conn
	}
	s.release()
}

// dropConn closes the connection (s.mu held); the next check dials again.
func (s *sansIo) dropConn() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// release unlocks s.mu; once closed, the connection goes with the last user.
func (s *sansIo) release() {
	s.mu.Unlock()
	if s.closed.Load() {
		s.shut()
	}
}

// close: no more checks; the connection closes now, or when the check
// using it is done.
func (s *sansIo) close() {
	s.closed.Store(true)
	s.shut()
}

func (s *sansIo) shut() {
	if s.mu.TryLock() {
		s.dropConn()
		s.mu.Unlock()
	}
}
