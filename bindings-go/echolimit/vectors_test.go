package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/echolimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
)

// server serves handler on every path and method (the vectors send methods
// such as "put": echo's not-found and not-allowed handlers too), behind echolimit.
func server(l *polylimit.Limiter, opts []polylimit.MiddlewareOption, handler http.Handler) http.Handler {
	e := echo.New()
	e.Use(echolimit.New(l, opts...))
	h := echo.WrapHandler(handler)
	e.Any("/*", h)
	e.RouteNotFound("/*", h)
	return e
}

func TestHTTPVectorsThroughEcho(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			adaptertest.PlayHTTP(t, url, server)
		})
	}
}
