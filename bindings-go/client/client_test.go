package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// clock is a wall clock only the injected Sleep moves.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return nil
}

type reply struct {
	status int
	header map[string]string
}

// scripted answers each request with the next reply (the last one again at the end).
type scripted struct {
	replies []reply
	bodies  []string
}

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	body := ""
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		body = string(b)
	}
	s.bodies = append(s.bodies, body)
	rep := s.replies[min(len(s.bodies)-1, len(s.replies)-1)]
	h := http.Header{}
	for k, v := range rep.header {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: rep.status, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

func transport(c *clock, base http.RoundTripper) *RetryTransport {
	return &RetryTransport{Base: base, Jitter: -1, Sleep: c.Sleep, Now: c.Now, Rand: func() float64 { return 0.5 }}
}

func do(t *testing.T, rt http.RoundTripper, method string, body io.Reader) int {
	t.Helper()
	req, _ := http.NewRequest(method, "http://api/x", body)
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestParseRetryAfter(t *testing.T) {
	rfc850 := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	for _, c := range []struct {
		value string
		now   time.Time
		want  time.Duration
	}{
		{"0", t0, 0},
		{" 7 ", t0, 7 * time.Second},
		{t0.Add(30 * time.Second).UTC().Format(http.TimeFormat), t0, 30 * time.Second},
		{"Sunday, 06-Nov-94 08:49:37 GMT", rfc850.Add(-5 * time.Second), 5 * time.Second},
		{"Sun Nov  6 08:49:37 1994", rfc850.Add(-5 * time.Second), 5 * time.Second},
		{t0.Add(-30 * time.Second).UTC().Format(http.TimeFormat), t0, 0},
	} {
		if got, ok := ParseRetryAfter(c.value, c.now); !ok || got != c.want {
			t.Errorf("%q: got %v %v, want %v", c.value, got, ok, c.want)
		}
	}
	for _, garbage := range []string{"", "-1", "1.5", "soon", "+3", "99999999999999999999"} {
		if got, ok := ParseRetryAfter(garbage, t0); ok {
			t.Errorf("%q: got %v, want none", garbage, got)
		}
	}
}

func TestWaitsRetryAfterWithJitter(t *testing.T) {
	c := &clock{now: t0}
	s := &scripted{replies: []reply{{429, map[string]string{"Retry-After": "2"}}, {200, nil}}}
	rt := transport(c, s)
	rt.Jitter = 0.2
	if got := do(t, rt, "GET", nil); got != 200 || len(s.bodies) != 2 {
		t.Fatalf("status %d after %d attempts", got, len(s.bodies))
	}
	if want := time.Duration(float64(2*time.Second) * 1.1); len(c.slept) != 1 || c.slept[0] != want {
		t.Fatalf("slept %v, want [%v]", c.slept, want)
	}
}

func TestHTTPDateAnd503(t *testing.T) {
	c := &clock{now: t0}
	date := t0.Add(3 * time.Second).UTC().Format(http.TimeFormat)
	s := &scripted{replies: []reply{{503, map[string]string{"Retry-After": date}}, {200, nil}}}
	if got := do(t, transport(c, s), "GET", nil); got != 200 || len(c.slept) != 1 || c.slept[0] != 3*time.Second {
		t.Fatalf("status %d, slept %v", got, c.slept)
	}
}

func TestGivesUpAtOnce(t *testing.T) {
	for _, rep := range []reply{
		{429, nil},
		{429, map[string]string{"Retry-After": "later"}},
		{500, map[string]string{"Retry-After": "1"}},
		{429, map[string]string{"Retry-After": "61"}}, // over MaxWait (60 s)
	} {
		c := &clock{now: t0}
		s := &scripted{replies: []reply{rep, {200, nil}}}
		if got := do(t, transport(c, s), "GET", nil); got != rep.status || len(s.bodies) != 1 || len(c.slept) != 0 {
			t.Errorf("%v: status %d, %d attempts, slept %v", rep, got, len(s.bodies), c.slept)
		}
	}
}

func TestJitterIsCappedByMaxWait(t *testing.T) {
	c := &clock{now: t0}
	s := &scripted{replies: []reply{{429, map[string]string{"Retry-After": "10"}}, {200, nil}}}
	rt := transport(c, s)
	rt.Jitter, rt.MaxWait, rt.Rand = 1, 12*time.Second, func() float64 { return 0.9 }
	if got := do(t, rt, "GET", nil); got != 200 || c.slept[0] != 12*time.Second {
		t.Fatalf("status %d, slept %v", got, c.slept)
	}
}

func TestMaxRetriesAndBudget(t *testing.T) {
	c := &clock{now: t0}
	s := &scripted{replies: []reply{{429, map[string]string{"Retry-After": "1"}}}}
	rt := transport(c, s)
	rt.MaxRetries = 2
	if got := do(t, rt, "GET", nil); got != 429 || len(s.bodies) != 3 || len(c.slept) != 2 {
		t.Fatalf("max retries: status %d, %d attempts, slept %v", got, len(s.bodies), c.slept)
	}

	c = &clock{now: t0}
	s = &scripted{replies: []reply{{429, map[string]string{"Retry-After": "4"}}}}
	rt = transport(c, s)
	rt.MaxRetries, rt.Budget = 10, 10*time.Second
	// A third wait would end 12 s after the first attempt.
	if got := do(t, rt, "GET", nil); got != 429 || len(s.bodies) != 3 || len(c.slept) != 2 {
		t.Fatalf("budget: status %d, %d attempts, slept %v", got, len(s.bodies), c.slept)
	}
}

func TestBodiesWithGetBodyAreReplayedOthersAreNot(t *testing.T) {
	c := &clock{now: t0}
	s := &scripted{replies: []reply{{429, map[string]string{"Retry-After": "1"}}, {200, nil}}}
	if got := do(t, transport(c, s), "POST", strings.NewReader("payload")); got != 200 ||
		strings.Join(s.bodies, ",") != "payload,payload" {
		t.Fatalf("status %d, bodies %q", got, s.bodies)
	}
	s = &scripted{replies: []reply{{429, map[string]string{"Retry-After": "1"}}, {200, nil}}}
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("once")); pw.Close() }()
	if got := do(t, transport(c, s), "POST", pr); got != 429 || len(s.bodies) != 1 {
		t.Fatalf("a stream without GetBody: status %d after %d attempts", got, len(s.bodies))
	}
}

func TestContextCancelsTheWait(t *testing.T) {
	s := &scripted{replies: []reply{{429, map[string]string{"Retry-After": "50"}}, {200, nil}}}
	rt := &RetryTransport{Base: s} // the real timer
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://api/x", nil)
	started := time.Now()
	res, err := rt.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) || res != nil || time.Since(started) > 5*time.Second {
		t.Fatalf("got %v %v after %v", res, err, time.Since(started))
	}
}
