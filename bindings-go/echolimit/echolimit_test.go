package echolimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/echolimit"
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

// The route is the template echo matched, in the core's canonical form: a
// rule on "/items/{id}" matches echo's "/items/:id", and every item shares
// one route key.
func TestTheRouteIsTheTemplateEchoMatched(t *testing.T) {
	l := rules(t, `
headers: legacy
policies:
  items: { rate: 1/min, burst: 2 }
rules:
  - { match: { route: "/items/{id}" }, key: [route], policy: items }
`)
	e := echo.New()
	e.Use(echolimit.New(l))
	e.GET("/items/:id", func(c echo.Context) error { return c.String(200, c.Param("id")) })
	e.GET("/other", func(c echo.Context) error { return c.String(200, "other") })
	srv := httptest.NewServer(e)
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

// count: failed charges what the handler answered: an echo.HTTPError 401,
// a plain error (500), and a panic that middleware.Recover answers (no
// response); a 200 is given back. A concurrency slot is released after
// each, errors and panics included.
func TestCountAndSlotsSettleWhatTheHandlerAnswered(t *testing.T) {
	l := rules(t, `
headers: legacy
policies:
  login: { algorithm: fixed_window, rate: 3/h }
  slots: { algorithm: concurrency, limit: 1, lease: 1h }
rules:
  - { match: { path: /login }, key: [ip], policy: login, count: failed }
  - { key: [ip], policy: slots }
`)
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	e.Use(middleware.Recover(), echolimit.New(l))
	e.GET("/login", func(c echo.Context) error {
		switch c.QueryParam("as") {
		case "401":
			return echo.NewHTTPError(http.StatusUnauthorized)
		case "error":
			return errors.New("the handler failed")
		case "panic":
			panic("the handler failed")
		default:
			return c.String(200, "ok")
		}
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	var got []int
	for _, as := range []string{"200", "200", "200", "200", "401", "200", "error", "panic", "200"} {
		s, _ := status(t, srv.URL+"/login?as="+as)
		got = append(got, s)
	}
	if want := "[200 200 200 200 401 200 500 500 429]"; fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

// A handler reports its request's actual cost with polylimit.ReportCost on
// c.Request().Context(): echolimit completes the request with it, and the
// next requests see the difference charged or given back.
func TestTheReportedCostIsSettled(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			l := rules(t, adaptertest.CostRules(url, "go-echo-cost-"+store, "/v1/*"))
			e := echo.New()
			e.Use(echolimit.New(l))
			e.POST("/v1/chat", func(c echo.Context) error {
				if used, ok := adaptertest.UsedCost(c.Request()); ok && !polylimit.ReportCost(c.Request().Context(), used) {
					return c.String(http.StatusInternalServerError, "no request to report the cost of")
				}
				return c.String(200, "answered")
			})
			srv := httptest.NewServer(e)
			defer srv.Close()
			adaptertest.PlayCost(t, srv.URL)
		})
	}
}

// polylimit.WithCostFunc gives each request's reservation through echo too.
func TestTheCostFuncReserves(t *testing.T) {
	l := rules(t, adaptertest.CostRules("memory", "go-echo-cost-func", "/v1/*"))
	e := echo.New()
	e.Use(echolimit.New(l, polylimit.WithCostFunc(adaptertest.EstimateCost)))
	e.POST("/v1/chat", func(c echo.Context) error { return c.String(200, "answered") })
	srv := httptest.NewServer(e)
	defer srv.Close()
	adaptertest.PlayCostFunc(t, srv.URL)
}
