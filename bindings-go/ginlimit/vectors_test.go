package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/ginlimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// engine serves handler on every path and method (NoRoute too: the
// vectors send methods such as "put"), behind ginlimit.
func engine(l *polylimit.Limiter, opts []polylimit.MiddlewareOption, handler http.Handler) http.Handler {
	r := gin.New()
	r.Use(ginlimit.New(l, opts...))
	r.Any("/*any", gin.WrapH(handler))
	r.NoRoute(gin.WrapH(handler))
	return r
}

func TestHTTPVectorsThroughGin(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			adaptertest.PlayHTTP(t, url, engine)
		})
	}
}
