// echo + polylimit: every request is decided by the shared rules file; the
// answers are the net/http example's (examples/go/demo), byte for byte.
package main

import (
	"io"
	"log"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/echolimit"
	"github.com/polylimit/polylimit/examples/go/demo"
)

func main() {
	limiter, err := polylimit.FromFile(demo.Rules())
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	user := polylimit.WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") }) // stands in for your auth
	// Recover first: a panicking handler (a report with fail=1) is answered
	// 500 after echolimit has released its slot.
	e.Use(middleware.Recover(), echolimit.New(limiter, user))
	e.GET("/api/:name", func(c echo.Context) error {
		demo.Reply(c.Response(), map[string]string{"hello": c.Param("name")})
		return nil
	})
	e.POST("/api/payments/:id", func(c echo.Context) error {
		demo.Reply(c.Response(), map[string]string{"paid": c.Param("id")})
		return nil
	})
	// An LLM-style endpoint: the rules file's llm rule reserves the X-Reserve header's cost before
	// the handler; the handler reports the actual cost (here X-Actual-Cost, in a real app the
	// model's token usage) and echolimit reconciles after the response.
	e.POST("/api/llm", func(c echo.Context) error {
		if actual, err := strconv.ParseInt(c.Request().Header.Get("X-Actual-Cost"), 10, 64); err == nil {
			polylimit.ReportCost(c.Request().Context(), actual)
		}
		demo.Reply(c.Response(), map[string]bool{"answered": true})
		return nil
	})
	e.POST("/login", func(c echo.Context) error { demo.Login(c.Response(), c.Request()); return nil })
	e.GET("/reports/:id", func(c echo.Context) error { demo.Report(c.Response(), c.Request(), c.Param("id")); return nil })
	e.GET("/stats", func(c echo.Context) error { demo.StatsAnswer(c.Response(), false); return nil })
	e.DELETE("/stats", func(c echo.Context) error { demo.StatsAnswer(c.Response(), true); return nil })
	e.GET("/metrics", func(c echo.Context) error {
		text, _ := limiter.Metrics()
		_, _ = io.WriteString(c.Response(), text)
		return nil
	})

	log.Printf("echo example on http://%s", demo.Addr())
	log.Fatal(e.Start(demo.Addr()))
}
