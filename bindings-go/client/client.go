// Package client is an http.RoundTripper that honours Retry-After. A
// service's clients can use it without polylimit's limiter; the rules (the
// parsing of Retry-After and the wait) are polylimit's core, called through
// the C ABI (cgo, the static library the main package links), as Python's
// polylimit.client, JavaScript's polylimit/client and the JVM's
// RetryAfterClient call them. This package keeps the transport, the sleep
// and the clock.
//
// On a response whose status is in Statuses (429 and 503 by default) the
// request is sent again (a status other than 429, which may come after the
// app processed the request, only for an idempotent method: GET, HEAD,
// OPTIONS, PUT, DELETE, unless RetryNonIdempotent is set) after the response's Retry-After (whole seconds, or an
// HTTP-date), plus a random jitter of up to Jitter times that wait (never
// earlier than the server asked). It gives up and returns the last response
// when the response has no readable Retry-After (the server did not say when:
// no guessing), when Retry-After is longer than MaxWait, after MaxRetries
// retries, when the wait would end more than Budget after the first attempt,
// or when the request's body cannot be sent again (a body without GetBody).
// Cancelling the request's context ends the wait with the context's error.
// A field out of range (Jitter above 1, a Statuses entry that is no HTTP
// status) makes RoundTrip return an error naming it and its value, before
// any request is sent.
package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults of the zero RetryTransport's fields, the core's (read once from
// it: RoundTrip asks the core, which applies the same); DefaultStatuses are
// the statuses retried when Statuses is nil.
var (
	DefaultMaxRetries, DefaultMaxWait, DefaultBudget, DefaultJitter, DefaultStatuses = coreDefaults()
)

// RetryTransport retries 429 and 503 responses after their Retry-After.
// The zero value uses http.DefaultTransport and the defaults above.
//
//	client := &http.Client{Transport: &client.RetryTransport{MaxWait: 30 * time.Second}}
type RetryTransport struct {
	Base       http.RoundTripper // default http.DefaultTransport
	MaxRetries int               // retries after the first attempt; 0 = DefaultMaxRetries, <0 = none
	MaxWait    time.Duration     // longest single wait; a longer Retry-After returns the response; 0 = DefaultMaxWait
	Budget     time.Duration     // no wait ends later than this after the first attempt; 0 = DefaultBudget
	Jitter     float64           // up to this fraction of the wait is added (0 to 1); 0 = DefaultJitter, <0 = none
	Statuses   []int             // retried statuses; nil = DefaultStatuses
	// RetryNonIdempotent retries a status other than 429 for a method that
	// is not idempotent (POST, PATCH, …) too; by default only 429 is.
	RetryNonIdempotent bool

	// Sleep waits d or until ctx is done (tests inject one); default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the wall clock (default time.Now).
	Now func() time.Time
	// Rand gives a number in [0, 1) for the jitter (default math/rand/v2).
	Rand func() float64
}

// ParseRetryAfter is the wait a Retry-After value asks for from now: whole
// seconds (digits only), or an HTTP-date (IMF-fixdate, RFC 850, asctime; a
// past date is 0), in whole milliseconds. ok is false for a missing or
// unreadable value.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	return parseRetryAfter(value, true, now)
}

func (t *RetryTransport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *RetryTransport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// wait is how long to wait before the next attempt, or false to give up.
func (t *RetryTransport) wait(method string, resp *http.Response, retries int, started time.Time) (time.Duration, bool) {
	random := rand.Float64
	if t.Rand != nil {
		random = t.Rand
	}
	wait, ok, err := t.coreWait(method, resp.StatusCode, resp.Header.Get("Retry-After"), retries, started, t.now(), random())
	return wait, ok && err == nil
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RoundTrip sends req, and again after each retried response's Retry-After.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	started := t.now()
	pause := t.Sleep
	if pause == nil {
		pause = sleep
	}
	attempt := req
	for retries := 0; ; retries++ {
		resp, err := t.base().RoundTrip(attempt)
		if err != nil || !replayable {
			return resp, err
		}
		wait, retry := t.wait(req.Method, resp, retries, started)
		if !retry {
			return resp, nil
		}
		// Read a little of the body so the connection can be reused, then drop it.
		_, _ = io.CopyN(io.Discard, resp.Body, 4096)
		resp.Body.Close()
		if err := pause(req.Context(), wait); err != nil {
			return nil, err
		}
		attempt = req.Clone(req.Context())
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			attempt.Body = body
		}
	}
}
