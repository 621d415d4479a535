package polylimit

/*
#include "polylimit.h"
*/
import "C"

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

type middleware struct {
	key, user, apiKey, route func(*http.Request) string
	cost                     func(*http.Request) uint64
	now                      func(*http.Request) time.Time
	onError                  func(http.ResponseWriter, *http.Request, error)
}

// WithKeyFunc gives the "key" dimension of each request. Some rule of the
// limiter must read it (Options.KeyBy ["key"], or a rules file's rule keyed
// by key): otherwise each request with a key fails with a *ConfigError
// naming "key" (answered by WithErrorHandler), never silently keyed by IP.
func WithKeyFunc(f func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.key = f }
}

// WithUserFunc gives the authenticated user ("user" dimension); "" for anonymous.
func WithUserFunc(f func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.user = f }
}

// WithAPIKeyFunc gives the API key ("api_key" dimension).
func WithAPIKeyFunc(f func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.apiKey = f }
}

// WithRouteFunc gives the route template. By default it is the ServeMux
// pattern: r.Pattern inside the mux, or the pattern the wrapped
// *http.ServeMux would pick when the middleware wraps the whole mux.
func WithRouteFunc(f func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.route = f }
}

// WithErrorHandler answers when the limiter itself fails (closed, bad
// configuration); the default answers 500.
func WithErrorHandler(f func(http.ResponseWriter, *http.Request, error)) MiddlewareOption {
	return func(m *middleware) { m.onError = f }
}

// WithCostFunc gives the units each request consumes (0: 1).
func WithCostFunc(f func(*http.Request) uint64) MiddlewareOption {
	return func(m *middleware) { m.cost = f }
}

// WithNowFunc decides each request at the time f gives instead of on the
// store's clock (the zero Time keeps the store's), and completes it at the
// time f gives once the handler is done (CompleteOptions.NowMs): for tests
// and simulations only, as RequestInfo.NowMs.
func WithNowFunc(f func(*http.Request) time.Time) MiddlewareOption {
	return func(m *middleware) { m.now = f }
}

// Middleware limits an http.Handler by the limiter's rules (a rules file, or
// the one rule of Options.KeyBy). Every header, status and body comes from
// the core's Outcome: rate-limit headers on every answer, 429/503/403 with a
// JSON body when refused, and a shape-mode delay that waits without holding
// a thread.
func (l *Limiter) Middleware(opts ...MiddlewareOption) func(http.Handler) http.Handler {
	g := l.Gate(opts...)
	return func(next http.Handler) http.Handler {
		route := g.m.route
		mux, _ := next.(*http.ServeMux)
		if route != nil {
			mux = nil
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			known := g.l.knownRules()
			routeName := r.Pattern
			switch {
			case route != nil:
				routeName = route(r)
			case mux != nil && routeName == "" && known.readsRoute(g.l):
				// The pattern the mux will pick, found only when a rule reads the route.
				_, routeName = mux.Handler(r)
			}
			pass, ok := g.admitKnown(w, r, routeName, known)
			if !ok {
				return
			}
			if pass.Settles() {
				serveAndSettle(next, w, pass)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Gate is Middleware's check for routers whose middlewares are not
// http.Handler wrappers (gin, echo): each request is decided, answered and
// settled exactly as Middleware does, with the route template the router
// knows.
type Gate struct {
	l *Limiter
	m middleware
}

// Gate returns the check Middleware(opts...) makes, for a router's own
// middleware.
func (l *Limiter) Gate(opts ...MiddlewareOption) *Gate {
	g := &Gate{l: l, m: middleware{onError: func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}}}
	for _, opt := range opts {
		opt(&g.m)
	}
	return g
}

// Admit decides r, whose route template the router gives (WithRouteFunc
// wins), sets the outcome's headers on w and, when it refuses r, writes the
// refusal; a shape-mode delay is waited out here. It returns ok false when
// r must not be served: refused, the limiter failed (WithErrorHandler
// answered), or the client left during the delay. Otherwise serve
// pass.Request() (r, with a context where ReportCost reaches this request)
// and, when pass.Settles(), call pass.Done once the handler has ended.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, route string) (pass Pass, ok bool) {
	if g.m.route != nil {
		route = g.m.route(r)
	}
	return g.admitKnown(w, r, route, g.l.knownRules())
}

// admitKnown is Admit with route found and what l remembers of its rules
// (nil: every header is packed).
func (g *Gate) admitKnown(w http.ResponseWriter, r *http.Request, route string, known *knownRules) (Pass, bool) {
	l, m := g.l, &g.m
	ctx := r.Context()
	if err := ctx.Err(); err != nil {
		m.onError(w, r, err)
		return Pass{}, false
	}
	p := getPacker()
	m.pack(p, r, route, l, known)
	var cost uint64
	if m.cost != nil {
		cost = m.cost(r)
	}
	var nowMs int64
	var flags C.uint32_t
	if m.now != nil {
		if t := m.now(r); !t.IsZero() {
			nowMs, flags = t.UnixMilli(), C.POLYLIMIT_HAS_NOW_MS
		}
	}
	packed, err := l.tryRequest(ctx, p, cost, nowMs, flags)
	putPacker(p)
	if err != nil {
		m.onError(w, r, err)
		return Pass{}, false
	}
	head, ok := writeOutcome(w, packed)
	if !ok {
		m.onError(w, r, badOutcome())
		return Pass{}, false
	}
	if head.status != 0 {
		return Pass{}, false
	}
	if head.delay > 0 {
		t := time.NewTimer(head.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if head.completion != "" {
				// Gone before an answer: no response.
				_ = l.Complete(context.WithoutCancel(ctx), head.completion, 0)
			}
			return Pass{}, false
		}
	}
	if head.completion == "" {
		return Pass{l: l, r: r}, true
	}
	// Where the handler reports the request's actual cost (ReportCost).
	return Pass{l: l, r: r.WithContext(NewCostContext(ctx)), token: head.completion, now: m.now}, true
}

// Pass is a request Gate.Admit let through.
type Pass struct {
	l     *Limiter
	r     *http.Request
	token string
	now   func(*http.Request) time.Time // WithNowFunc's
}

// Request is the request to serve: when it Settles, the admitted request
// with a context where the handler reports its actual cost (ReportCost);
// a router's middleware makes it the framework's request (gin's
// c.Request, echo's c.SetRequest).
func (p Pass) Request() *http.Request { return p.r }

// Settles reports whether the request's charge depends on how it ends (a
// rule's count, a concurrency slot): Done must then be called after the
// handler.
func (p Pass) Settles() bool { return p.token != "" }

// Done settles the request once its handler has ended, by the core's rule:
// written is the status the handler wrote (0: none), panicked whether it
// panicked. A client gone by then counts as "no response" unless a status
// was written. The actual cost the handler reported (ReportCost) replaces
// the reservation. Without Settles it does nothing.
func (p Pass) Done(written int, panicked bool) {
	if p.token == "" {
		return
	}
	status := endedStatus(written, panicked, p.r.Context().Err() != nil)
	// A refund that must happen even when the client is gone; the core bounds it by its timeout.
	ctx := context.WithoutCancel(p.r.Context())
	opts := CompleteOptions{Cost: ReportedCost(ctx)}
	if p.now != nil {
		if t := p.now(p.r); !t.IsZero() {
			ms := t.UnixMilli()
			opts.NowMs = &ms
		}
	}
	_ = p.l.CompleteWith(ctx, p.token, status, opts)
}

// serveAndSettle serves a request whose charge depends on its status (a
// rule's count), then settles it once with the core's rule (endedStatus):
// the status the handler wrote, also when the client left since or it
// panicked after writing (the panic goes on); 200 when it wrote nothing to
// a client still there; no response when it wrote nothing and panicked or
// its client went away.
func serveAndSettle(next http.Handler, w http.ResponseWriter, pass Pass) {
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		p := recover()
		pass.Done(rec.status, p != nil)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(rec, pass.Request())
}

// statusRecorder remembers the status a handler writes. Flush, Hijack and
// the ResponseController methods reach the wrapped writer.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) ReadFrom(src io.Reader) (int64, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return io.Copy(s.ResponseWriter, src)
}

// Flush keeps streaming handlers working (http.Flusher).
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack keeps websocket upgrades working (http.Hijacker).
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the wrapped writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// pack packs what the core needs to know about r, straight from r: no
// RequestInfo, no copy of its headers, only the headers the rules may read
// (known; nil: all).
func (m *middleware) pack(p *packer, r *http.Request, routeName string, l *Limiter, known *knownRules) {
	var key, user, apiKey string
	if m.key != nil {
		key = m.key(r)
	}
	if m.user != nil {
		user = m.user(r)
	}
	if m.apiKey != nil {
		apiKey = m.apiKey(r)
	}
	// The path as sent, whose escapes r.URL.Path has decoded ("%2F" is no
	// "/", "%25" no "%"): r.URL.RawPath when it differs from the path's
	// default encoding, else that encoding (r.URL.Path itself unless it has
	// a character to escape); the core decodes what it may.
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.EscapedPath()
	}
	p.fields(r.Method, path, routeName, r.RemoteAddr, user, apiKey, key)
	at, n := p.headerCount(), 0
	for name, values := range r.Header {
		if !known.readsHeader(l, name) {
			continue
		}
		for _, v := range values {
			p.str(name)
			p.str(v)
			n++
		}
	}
	p.setCount(at, n)
}

// writeOutcome sets the outcome's headers on w and, when it refuses the request,
// writes the refusal. Returns the outcome's head (status 0: serve it, after
// head.delay, and settle head.completion after the response when set) and
// false when the outcome is malformed (nothing written).
func writeOutcome(w http.ResponseWriter, packed string) (outcomeHead, bool) {
	r := reader{s: packed}
	head := r.head()
	n := r.count(8)
	// One slice backs every header's value: one allocation, not one per header.
	values := make([]string, n)
	var few [8]string
	names := few[:0]
	if n > len(few) {
		names = make([]string, 0, n)
	}
	names = names[:n]
	for i := range values {
		names[i], values[i] = r.str(), r.str()
	}
	r.skipPairs() // trailers: an HTTP request has none
	var body string
	if head.hasBody {
		body = r.str()
	}
	r.skipDecisions()
	if completion := r.optStr(); completion != "" {
		head.completion = strings.Clone(completion)
	}
	if r.bad {
		return head, false
	}
	h := w.Header()
	for i, name := range names {
		h[canonicalName(name)] = values[i : i+1 : i+1]
	}
	if head.status != 0 {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(head.status)
		_, _ = io.WriteString(w, body)
	}
	return head, true
}
