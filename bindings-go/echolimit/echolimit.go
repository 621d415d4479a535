// Package echolimit limits echo (v4) routes by a polylimit Limiter's rules:
// the net/http middleware's check (polylimit.Gate), with the route template
// echo matched (c.Path()) as the "route" dimension.
//
//	e := echo.New()
//	e.Use(echolimit.New(limiter))
//
// The net/http middleware's options apply (polylimit.WithUserFunc,
// polylimit.WithCostFunc, …). A handler that learns its request's actual
// cost (an LLM call's tokens) reports it with
// polylimit.ReportCost(c.Request().Context(), n): the request is completed
// with it after the handler, the difference from its reservation given
// back or charged.
package echolimit

import (
	"github.com/labstack/echo/v4"
	polylimit "github.com/polylimit/polylimit/bindings-go"
)

// New returns an echo middleware that decides every request by l's rules
// and answers exactly as l.Middleware(opts...) does: rate-limit headers on
// every answer, the core's refusal (429, 503, 403 with its JSON body)
// instead of the handler, a shape-mode delay waited out, and a rule's count
// or concurrency slot settled once the handler has ended, with the actual
// cost it reported (polylimit.ReportCost). A handler's error
// is answered here (c.Error, as echo's logger does) so that its status is
// the one settled; a panic is settled as the core's rule says and goes on.
func New(l *polylimit.Limiter, opts ...polylimit.MiddlewareOption) echo.MiddlewareFunc {
	g := l.Gate(opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			res := c.Response()
			pass, ok := g.Admit(res, c.Request(), c.Path())
			if !ok {
				return nil
			}
			if !pass.Settles() {
				return next(c)
			}
			// Its context is where the handler reports the actual cost (polylimit.ReportCost).
			c.SetRequest(pass.Request())
			defer func() {
				p := recover()
				written := 0
				if res.Committed {
					written = res.Status
				}
				pass.Done(written, p != nil)
				if p != nil {
					panic(p)
				}
			}()
			if err = next(c); err != nil {
				c.Error(err)
			}
			return err
		}
	}
}
