package polylimit

import (
	"net/http"
	"time"
)

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

type middleware struct {
	key, user, apiKey, route func(*http.Request) string
	onError                  func(http.ResponseWriter, *http.Request, error)
}

// WithKeyFunc gives the "key" dimension of each request (use KeyBy ["key"]).
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

// Middleware limits an http.Handler by the limiter's rules (a rules file, or
// the one rule of Options.KeyBy). Every header, status and body comes from
// the core's Outcome: rate-limit headers on every answer, 429/503/403 with a
// JSON body when refused, and a shape-mode delay that waits without holding
// a thread.
func (l *Limiter) Middleware(opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{onError: func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}}
	for _, opt := range opts {
		opt(m)
	}
	return func(next http.Handler) http.Handler {
		route := m.route
		if mux, ok := next.(*http.ServeMux); ok && route == nil {
			route = func(r *http.Request) string {
				if r.Pattern != "" {
					return r.Pattern
				}
				_, pattern := mux.Handler(r)
				return pattern
			}
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info := m.request(r, route)
			outcome, err := l.checkRequest(r.Context(), info, false)
			if err != nil {
				m.onError(w, r, err)
				return
			}
			h := w.Header()
			for _, kv := range outcome.Headers {
				h.Set(kv[0], kv[1])
			}
			if outcome.Status != 0 {
				h.Set("Content-Type", "application/json")
				w.WriteHeader(outcome.Status)
				_, _ = w.Write([]byte(outcome.Body))
				return
			}
			if outcome.Delay > 0 {
				t := time.NewTimer(outcome.Delay)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (m *middleware) request(r *http.Request, route func(*http.Request) string) *RequestInfo {
	info := &RequestInfo{Method: r.Method, Path: r.URL.Path, Peer: r.RemoteAddr, Route: r.Pattern}
	for name, values := range r.Header {
		for _, v := range values {
			info.Headers = append(info.Headers, [2]string{name, v})
		}
	}
	if route != nil {
		info.Route = route(r)
	}
	if m.key != nil {
		info.Key = m.key(r)
	}
	if m.user != nil {
		info.User = m.user(r)
	}
	if m.apiKey != nil {
		info.APIKey = m.apiKey(r)
	}
	return info
}
