package ginlimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/ginlimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
)

func rules(t *testing.T, text string) *polylimit.Limiter {
	t.Helper()
	l, err := polylimit.FromRules(text)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func status(t *testing.T, url string) (int, http.Header) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header
}

// The route is the template gin matched, in the core's canonical form: a
// rule on "/items/{id}" matches gin's "/items/:id", and every item shares
// one route key.
func TestTheRouteIsTheTemplateGinMatched(t *testing.T) {
	l := rules(t, `
headers: legacy
policies:
  items: { rate: 1/min, burst: 2 }
rules:
  - { match: { route: "/items/{id}" }, key: [route], policy: items }
`)
	r := gin.New()
	r.Use(ginlimit.New(l))
	r.GET("/items/:id", func(c *gin.Context) { c.String(200, c.Param("id")) })
	r.GET("/other", func(c *gin.Context) { c.String(200, "other") })
	srv := httptest.NewServer(r)
	defer srv.Close()
	var got []int
	for i := 1; i <= 3; i++ {
		s, _ := status(t, fmt.Sprintf("%s/items/%d", srv.URL, i))
		got = append(got, s)
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("items: %v, want [200 200 429]", got)
	}
	if s, h := status(t, srv.URL+"/other"); s != 200 || h.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/other: %d %v, want 200 without rate-limit headers", s, h)
	}
}

// count: failed charges what the handlers answered: c.Status(401) alone
// (gin writes it after the handlers), an aborted 403, and a panic that
// gin.Recovery answers (no response); a 200 is given back. A concurrency
// slot is released after each, panics included.
func TestCountAndSlotsSettleWhatTheHandlersAnswered(t *testing.T) {
	l := rules(t, `
headers: legacy
policies:
  login: { algorithm: fixed_window, rate: 3/h }
  slots: { algorithm: concurrency, limit: 1, lease: 1h }
rules:
  - { match: { path: /login }, key: [ip], policy: login, count: failed }
  - { key: [ip], policy: slots }
`)
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), ginlimit.New(l))
	r.GET("/login", func(c *gin.Context) {
		switch c.Query("as") {
		case "401":
			c.Status(http.StatusUnauthorized)
		case "403":
			c.AbortWithStatus(http.StatusForbidden)
		case "panic":
			panic("the handler failed")
		default:
			c.String(200, "ok")
		}
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	var got []int
	for _, as := range []string{"200", "200", "200", "200", "401", "200", "403", "panic", "200"} {
		s, _ := status(t, srv.URL+"/login?as="+as)
		got = append(got, s)
	}
	if want := "[200 200 200 200 401 200 403 500 429]"; fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

// A handler reports its request's actual cost with polylimit.ReportCost on
// c.Request.Context(): ginlimit completes the request with it, and the next
// requests see the difference charged or given back.
func TestTheReportedCostIsSettled(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			l := rules(t, adaptertest.CostRules(url, "go-gin-cost-"+store, "/v1/*"))
			r := gin.New()
			r.Use(ginlimit.New(l))
			r.POST("/v1/chat", func(c *gin.Context) {
				if used, ok := adaptertest.UsedCost(c.Request); ok && !polylimit.ReportCost(c.Request.Context(), used) {
					c.String(http.StatusInternalServerError, "no request to report the cost of")
					return
				}
				c.String(200, "answered")
			})
			srv := httptest.NewServer(r)
			defer srv.Close()
			adaptertest.PlayCost(t, srv.URL)
		})
	}
}

// polylimit.WithCostFunc gives each request's reservation through gin too.
func TestTheCostFuncReserves(t *testing.T) {
	l := rules(t, adaptertest.CostRules("memory", "go-gin-cost-func", "/v1/*"))
	r := gin.New()
	r.Use(ginlimit.New(l, polylimit.WithCostFunc(adaptertest.EstimateCost)))
	r.POST("/v1/chat", func(c *gin.Context) { c.String(200, "answered") })
	srv := httptest.NewServer(r)
	defer srv.Close()
	adaptertest.PlayCostFunc(t, srv.URL)
}
