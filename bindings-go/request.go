package polylimit

import (
	"encoding/json"
	"time"
)

// RequestInfo is what the core needs to know about an HTTP request.
type RequestInfo struct {
	Method string `json:"method,omitempty"`
	// Path is the path the router saw, or the request target: the core
	// reduces an absolute-form target to its path, drops the query and
	// fragment and decodes unreserved percent-escapes before matching.
	Path string `json:"path,omitempty"`
	// Route is the route template, when known; without one the "route"
	// dimension is "unmatched".
	Route string `json:"route,omitempty"`
	// Peer is the TCP peer address; "" or "@" (a Unix socket) is a peer
	// without an address, trusted only with "unix" in TrustedProxies.
	Peer    string      `json:"peer,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
	User    string      `json:"user,omitempty"`
	APIKey  string      `json:"api_key,omitempty"`
	Key     string      `json:"key,omitempty"` // the "key" dimension, chosen by the caller
	Cost    uint64      `json:"cost,omitempty"`
	NowMs   *int64      `json:"now_ms,omitempty"` // tests and simulations only
	// The router's path matching: case-insensitive, one trailing slash
	// ignored. Both false for net/http's ServeMux.
	CaseInsensitive     bool `json:"case_insensitive,omitempty"`
	IgnoreTrailingSlash bool `json:"ignore_trailing_slash,omitempty"`
}

// Outcome says how to answer a request.
type Outcome struct {
	// Status is 0 to let the request through, else 429, 503 or 403.
	Status int
	// Headers to set on the response, allowed or not, in order.
	Headers [][2]string
	// Body of a refusal (JSON); HasBody says whether there is one.
	Body    string
	HasBody bool
	// Delay: hold the request this long before serving it (shape mode).
	Delay time.Duration
	// Decisions: every policy's decision.
	Decisions []RuleDecision
}

// RuleDecision is one policy's decision for a request.
type RuleDecision struct {
	Rule     string
	Policy   string
	Shadow   bool
	Decision Decision
}

type outcomeJSON struct {
	Status    *int        `json:"status"`
	Headers   [][2]string `json:"headers"`
	Body      *string     `json:"body"`
	DelayMs   uint64      `json:"delay_ms"`
	Decisions []struct {
		Rule         string  `json:"rule"`
		Policy       string  `json:"policy"`
		Allowed      bool    `json:"allowed"`
		Limit        uint64  `json:"limit"`
		Remaining    uint64  `json:"remaining"`
		ResetAfterMs uint64  `json:"reset_after_ms"`
		RetryAfterMs *uint64 `json:"retry_after_ms"`
		DelayMs      uint64  `json:"delay_ms"`
		Source       string  `json:"source"`
		Shadow       bool    `json:"shadow"`
	} `json:"decisions"`
}

func parseOutcome(text string) (*Outcome, error) {
	var raw outcomeJSON
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, &Error{Kind: ErrInternal, Message: "outcome: " + err.Error()}
	}
	o := &Outcome{Headers: raw.Headers, Delay: millis(raw.DelayMs)}
	if raw.Status != nil {
		o.Status = *raw.Status
	}
	if raw.Body != nil {
		o.Body, o.HasBody = *raw.Body, true
	}
	for _, d := range raw.Decisions {
		dec := Decision{
			Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
			ResetAfter: millis(d.ResetAfterMs),
			Delay:      millis(d.DelayMs), Source: Source(d.Source),
		}
		if d.RetryAfterMs != nil {
			dec.RetryAfter, dec.HasRetryAfter = millis(*d.RetryAfterMs), true
		}
		o.Decisions = append(o.Decisions, RuleDecision{Rule: d.Rule, Policy: d.Policy, Shadow: d.Shadow, Decision: dec})
	}
	return o, nil
}
