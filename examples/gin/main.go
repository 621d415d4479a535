// gin + polylimit: every request is decided by the shared rules file; the
// answers are the net/http example's (examples/go/demo), byte for byte.
package main

import (
	"io"
	"log"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/ginlimit"
	"github.com/polylimit/polylimit/examples/go/demo"
)

func main() {
	limiter, err := polylimit.FromFile(demo.Rules())
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	user := polylimit.WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") }) // stands in for your auth
	// Recovery first: a panicking handler (a report with fail=1) is answered
	// 500 after ginlimit has released its slot.
	r.Use(gin.Recovery(), ginlimit.New(limiter, user))
	r.GET("/api/:name", func(c *gin.Context) { demo.Reply(c.Writer, map[string]string{"hello": c.Param("name")}) })
	r.POST("/api/payments/:id", func(c *gin.Context) { demo.Reply(c.Writer, map[string]string{"paid": c.Param("id")}) })
	// An LLM-style endpoint: the rules file's llm rule reserves the X-Reserve header's cost before
	// the handler; the handler reports the actual cost (here X-Actual-Cost, in a real app the
	// model's token usage) and ginlimit reconciles after the response.
	r.POST("/api/llm", func(c *gin.Context) {
		if actual, err := strconv.ParseInt(c.GetHeader("X-Actual-Cost"), 10, 64); err == nil {
			polylimit.ReportCost(c.Request.Context(), actual)
		}
		demo.Reply(c.Writer, map[string]bool{"answered": true})
	})
	r.POST("/login", func(c *gin.Context) { demo.Login(c.Writer, c.Request) })
	r.GET("/reports/:id", func(c *gin.Context) { demo.Report(c.Writer, c.Request, c.Param("id")) })
	r.GET("/stats", func(c *gin.Context) { demo.StatsAnswer(c.Writer, false) })
	r.DELETE("/stats", func(c *gin.Context) { demo.StatsAnswer(c.Writer, true) })
	r.GET("/metrics", func(c *gin.Context) {
		text, _ := limiter.Metrics()
		_, _ = io.WriteString(c.Writer, text)
	})

	log.Printf("gin example on http://%s", demo.Addr())
	log.Fatal(r.Run(demo.Addr()))
}
