// Package client is an http.RoundTripper that honours Retry-After. It is pure
// Go (no cgo, no native library): a service's clients can use it without
// polylimit's limiter. The same rules as Python's polylimit.client and
// JavaScript's polylimit/client.
//
// On a response whose status is in Statuses (429 and 503 by default) the
// request is sent again after the response's Retry-After (whole seconds, or an
// HTTP-date), plus a random jitter of up to Jitter times that wait (never
// earlier than the server asked). It gives up and returns the last response
// when the response has no readable Retry-After (the server did not say when:
// no guessing), when Retry-After is longer than MaxWait, after MaxRetries
// retries, when the wait would end more than Budget after the first attempt,
// or when the request's body cannot be sent again (a body without GetBody).
// Cancelling the request's context ends the wait with the context's error.
package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of the zero RetryTransport's fields.
const (
	DefaultMaxRetries = 3
	DefaultMaxWait    = 60 * time.Second
	DefaultBudget     = 120 * time.Second
	DefaultJitter     = 0.1
)

// DefaultStatuses are the statuses retried when Statuses is nil.
var DefaultStatuses = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}

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

	// Sleep waits d or until ctx is done (tests inject one); default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the wall clock (default time.Now); Rand gives [0, 1) (default math/rand/v2).
	Now  func() time.Time
	Rand func() float64
}

// ParseRetryAfter is the wait a Retry-After value asks for from now: whole
// seconds (digits only), or an HTTP-date in any form http.ParseTime reads
// (IMF-fixdate, RFC 850, asctime; a past date is 0). ok is false for a
// missing or unreadable value.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	text := strings.TrimSpace(value)
	if text == "" {
		return 0, false
	}
	if strings.Trim(text, "0123456789") == "" {
		secs, err := strconv.ParseInt(text, 10, 64)
		if err != nil || secs > int64(1<<63-1)/int64(time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	when, err := http.ParseTime(text)
	if err != nil {
		return 0, false
	}
	return max(0, when.Sub(now)), true
}

func (t *RetryTransport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func orDefault[T int | time.Duration | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return max(v, 0)
}

func (t *RetryTransport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// wait is how long to wait before the next attempt, or false to give up.
func (t *RetryTransport) wait(resp *http.Response, retries int, started time.Time) (time.Duration, bool) {
	statuses := t.Statuses
	if statuses == nil {
		statuses = DefaultStatuses
	}
	if !slices.Contains(statuses, resp.StatusCode) || retries >= orDefault(t.MaxRetries, DefaultMaxRetries) {
		return 0, false
	}
	now := t.now()
	delay, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	maxWait := orDefault(t.MaxWait, DefaultMaxWait)
	if !ok || delay > maxWait {
		return 0, false
	}
	random := rand.Float64
	if t.Rand != nil {
		random = t.Rand
	}
	jittered := time.Duration(float64(delay) * (1 + orDefault(t.Jitter, DefaultJitter)*random()))
	wait := min(max(jittered, delay), maxWait)
	if now.Add(wait).Sub(started) > orDefault(t.Budget, DefaultBudget) {
		return 0, false
	}
	return wait, true
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
		wait, retry := t.wait(resp, retries, started)
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
