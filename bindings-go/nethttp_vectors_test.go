package polylimit_test

import (
	"net/http"
	"testing"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
)

// The HTTP and cost vectors through Limiter.Middleware, as through gin and
// echo (a cost vector's actual cost reported with ReportCost by the handler).
func TestHTTPVectorsThroughTheMiddleware(t *testing.T) {
	middleware := func(l *polylimit.Limiter, opts []polylimit.MiddlewareOption, handler http.Handler) http.Handler {
		return l.Middleware(opts...)(handler)
	}
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			adaptertest.PlayHTTP(t, url, middleware)
		})
	}
}
