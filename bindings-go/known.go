package polylimit

/*
#include "polylimit.h"

// Neither keeps a Go pointer nor calls Go.
#cgo noescape polylimit_limiter_reads_header
#cgo nocallback polylimit_limiter_reads_header
#cgo nocallback polylimit_limiter_reads_route
#cgo nocallback polylimit_limiter_rules_generation
*/
import "C"

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// knownRules is what the middleware remembers of the rules in force: which
// request headers and whether the route template deciding a request may
// read (the core's answers, polylimit_limiter_reads_header and
// polylimit_limiter_reads_route), so it packs only those headers and finds
// the route only when some rule reads it. Headers the rules never read
// cannot change the outcome: the core drops them anyway.
//
// It holds for one rules generation (polylimit_limiter_rules_generation,
// asked on every request): a reload, by Reload or by the Watch option, moves
// it, and the next request asks the core again. The core swaps the rules in
// before it moves the generation, so a generation seen means its rules (or
// newer) are the ones answering.
type knownRules struct {
	generation int64
	route      atomic.Int32                    // 0: not asked yet; 1 read; 2 not read
	headers    atomic.Pointer[map[string]bool] // copied on write, at most maxKnownHeaders names
	mu         sync.Mutex                      // one writer of headers at a time
}

// maxKnownHeaders bounds the header names remembered (they are the
// clients'): a name beyond is asked each time it comes.
const maxKnownHeaders = 1024

// knownRules returns what l remembers of its rules in force, afresh when
// the rules generation moved; nil when the limiter is closed or the core
// cannot say (then every header is packed and the route always found, as
// without it).
func (l *Limiter) knownRules() *knownRules {
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return nil
	}
	generation := int64(C.polylimit_limiter_rules_generation(l.ptr))
	l.mu.RUnlock()
	if generation < 0 {
		return nil
	}
	k := l.known.Load()
	if k != nil && k.generation == generation {
		return k
	}
	fresh := &knownRules{generation: generation}
	if !l.known.CompareAndSwap(k, fresh) {
		// Another request replaced it: use its, when of this generation.
		if other := l.known.Load(); other != nil && other.generation == generation {
			return other
		}
	}
	return fresh
}

// readsHeader reports whether deciding a request may read its header name
// (nil k: true).
func (k *knownRules) readsHeader(l *Limiter, name string) bool {
	if k == nil {
		return true
	}
	m := k.headers.Load()
	if m != nil {
		if reads, ok := (*m)[name]; ok {
			return reads
		}
	}
	reads := l.askReadsHeader(name)
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.headers.Load()
	if old != nil && len(*old) >= maxKnownHeaders {
		return reads
	}
	next := make(map[string]bool, 8)
	if old != nil {
		for n, r := range *old {
			next[n] = r
		}
	}
	next[strings.Clone(name)] = reads
	k.headers.Store(&next)
	return reads
}

// readsRoute reports whether deciding a request may read its route
// template (nil k: true).
func (k *knownRules) readsRoute(l *Limiter) bool {
	if k == nil {
		return true
	}
	switch k.route.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	reads := l.askReadsRoute()
	if reads {
		k.route.Store(1)
	} else {
		k.route.Store(2)
	}
	return reads
}

// askReadsHeader is the core's answer for name; true when it cannot say
// (closed, not UTF-8): the header is then packed, as without knownRules.
func (l *Limiter) askReadsHeader(name string) bool {
	ptr, n := stringArg(name)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return true
	}
	reads := C.polylimit_limiter_reads_header(l.ptr, ptr, n) != 0
	runtime.KeepAlive(name)
	return reads
}

// askReadsRoute is the core's answer; true when it cannot say.
func (l *Limiter) askReadsRoute() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return true
	}
	return C.polylimit_limiter_reads_route(l.ptr) != 0
}
