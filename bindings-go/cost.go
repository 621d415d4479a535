package polylimit

import (
	"context"
	"sync"
)

// The actual cost of a request, learned while serving it (an LLM call's
// tokens): the handler reports it in its request's context (ReportCost),
// and the adapter that settles the request reads it back (ReportedCost)
// for the completion, where the core gives back or charges the difference
// from the reservation. One holder for every adapter: net/http's
// Middleware, Gate (gin, echo) and grpclimit's interceptors.

// costKey is the context key of a request's costHolder.
type costKey struct{}

// costHolder holds the actual cost a handler reported.
type costHolder struct {
	mu   sync.Mutex
	cost int64
	set  bool
}

// NewCostContext returns a context below ctx where ReportCost records the
// actual cost of the request it serves, for an adapter that settles
// requests itself: serve the request with it, then complete it with
// CompleteOptions{Cost: ReportedCost(ctx)}. Limiter.Middleware, Gate and
// grpclimit's interceptors do this for every request they settle.
func NewCostContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, costKey{}, &costHolder{})
}

// ReportCost records the actual cost of the request whose context is ctx,
// learned while serving it (an LLM call's tokens): once the handler is done,
// the adapter completes the request with it, so the difference from its
// reservation (a rule's cost) is given back or charged, capped at the rules'
// max_cost. Call it from a handler behind Limiter.Middleware with
// r.Context(), behind ginlimit with c.Request.Context(), behind echolimit
// with c.Request().Context(), and behind grpclimit's interceptors with the
// handler's ctx (a stream's ss.Context()). The last report wins. It returns
// false when ctx is not such a request's (the request carries no
// completion: no rule of it has a cost or a count).
func ReportCost(ctx context.Context, cost int64) bool {
	h, ok := ctx.Value(costKey{}).(*costHolder)
	if !ok {
		return false
	}
	h.mu.Lock()
	h.cost, h.set = cost, true
	h.mu.Unlock()
	return true
}

// ReportedCost is the actual cost ReportCost recorded in ctx (a context of
// NewCostContext, or below one), nil when none was: what CompleteOptions.Cost
// takes.
func ReportedCost(ctx context.Context) *int64 {
	h, ok := ctx.Value(costKey{}).(*costHolder)
	if !ok {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.set {
		return nil
	}
	cost := h.cost
	return &cost
}
