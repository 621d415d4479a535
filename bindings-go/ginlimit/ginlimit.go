// Package ginlimit limits gin routes by a polylimit Limiter's rules: the
// net/http middleware's check (polylimit.Gate), with the route template gin
// matched (c.FullPath()) as the "route" dimension.
//
//	r := gin.New()
//	r.Use(ginlimit.New(limiter))
//
// The net/http middleware's options apply (polylimit.WithUserFunc,
// polylimit.WithCostFunc, …). A handler that learns its request's actual
// cost (an LLM call's tokens) reports it with
// polylimit.ReportCost(c.Request.Context(), n): the request is completed
// with it after the handlers, the difference from its reservation given
// back or charged.
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"
	polylimit "github.com/polylimit/polylimit/bindings-go"
)

// New returns a gin middleware that decides every request by l's rules and
// answers exactly as l.Middleware(opts...) does: rate-limit headers on every
// answer, the core's refusal (429, 503, 403 with its JSON body) aborting the
// chain, a shape-mode delay waited out, and a rule's count or concurrency
// slot settled once the handlers have ended (a panic included), with the
// actual cost a handler reported (polylimit.ReportCost).
func New(l *polylimit.Limiter, opts ...polylimit.MiddlewareOption) gin.HandlerFunc {
	g := l.Gate(opts...)
	return func(c *gin.Context) {
		pass, ok := g.Admit(c.Writer, c.Request, c.FullPath())
		if !ok {
			c.Abort()
			return
		}
		if !pass.Settles() {
			c.Next()
			return
		}
		// Its context is where a handler reports the actual cost (polylimit.ReportCost).
		c.Request = pass.Request()
		defer func() {
			p := recover()
			pass.Done(written(c.Writer), p != nil)
			if p != nil {
				panic(p)
			}
		}()
		c.Next()
	}
}

// written is the status the handlers answered, 0 for none: gin sends a
// status set by c.Status only after the handlers, so a status other than
// its default 200 counts as written.
func written(w gin.ResponseWriter) int {
	if w.Written() || w.Status() != http.StatusOK {
		return w.Status()
	}
	return 0
}
