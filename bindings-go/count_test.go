package polylimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// countHandler answers the status its "status" query parameter asks for;
// "panic" panics, "flush" streams (it needs http.Flusher), "hang" waits
// until the client goes away.
func countHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch q := r.URL.Query(); {
		case q.Has("panic"):
			panic("the handler failed")
		case q.Has("writepanic"):
			// Answers 200 (sent at once), then fails.
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			panic("the handler failed after answering")
		case q.Has("hang"):
			<-r.Context().Done()
		case q.Has("flush"):
			f, ok := w.(http.Flusher)
			if !ok {
				http.Error(w, "no flusher", http.StatusInternalServerError)
				return
			}
			_, _ = io.WriteString(w, "part")
			f.Flush()
		case q.Has("silent"):
			// writes nothing: net/http answers 200
		default:
			status, _ := strconv.Atoi(q.Get("status"))
			w.WriteHeader(status)
		}
	})
}

// countServer serves countHandler through the middleware; `settled` gets a
// value once the middleware is done with a "hang" request (its handler saw
// the client gone and the middleware settled it).
func countServer(t *testing.T, opts Options) (srv *httptest.Server, settled <-chan struct{}) {
	t.Helper()
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hangs := make(chan struct{}, 1)
	limited := l.Middleware()(countHandler())
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limited.ServeHTTP(w, r)
		if r.URL.Query().Has("hang") {
			hangs <- struct{}{}
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panicking handler's report
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		l.Close()
	})
	return srv, hangs
}

// countClient opens a connection per request: a GET on a reused connection
// that drops (the panicking handler) would be sent again by the transport.
var countClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func countGet(t *testing.T, srv *httptest.Server, query string) (int, string) {
	t.Helper()
	res, err := countClient.Get(srv.URL + "/login?" + query)
	if err != nil {
		return 0, "" // the server dropped the connection (a panicking handler)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, res.Header.Get("X-RateLimit-Remaining")
}

// Options.Count through Middleware: successes are given back after the
// response, failures count, and so do a panicking handler and a client that
// goes away; a streaming handler keeps its http.Flusher.
func TestMiddlewareCountsOnlyFailures(t *testing.T) {
	for name, url := range map[string]string{"memory": "memory", "redis": startRedis(t).url()} {
		t.Run(name, func(t *testing.T) {
			srv, settled := countServer(t, Options{
				Policy: &Policy{Algorithm: "fixed_window", Rate: "3/h"},
				Count:  []string{"failed"}, Store: url, Prefix: fmt.Sprintf("go-count-%d", time.Now().UnixNano()),
			})
			for i := 0; i < 5; i++ {
				if status, remaining := countGet(t, srv, "status=200"); status != 200 || remaining != "2" {
					t.Fatalf("success %d: %d, remaining %q", i, status, remaining)
				}
			}
			for _, q := range []string{"flush", "silent", "status=302"} {
				if status, remaining := countGet(t, srv, q); status != 200 && status != 302 || remaining != "2" {
					t.Fatalf("%s: %d, remaining %q", q, status, remaining)
				}
			}
			if status, _ := countGet(t, srv, "status=401"); status != 401 {
				t.Fatalf("a failure: %d", status)
			}
			if status, _ := countGet(t, srv, "panic"); status != 0 && status != 500 {
				t.Fatalf("a panic: %d", status)
			}
			// A client that goes away before any answer.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/login?hang", nil)
			if res, err := countClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("hang: %v %+v", err, res)
			}
			cancel()
			<-settled
			if status, _ := countGet(t, srv, "status=200"); status != 429 {
				t.Fatalf("3 failures later: %d", status)
			}
		})
	}
}

// The status a request ends with is the core's rule (SPEC §6): a handler
// that answered 200 and then panicked is charged as 200 (it was "no
// response", so free under count: successful), while one that panicked
// with nothing written is no response.
func TestMiddlewareChargesTheAnswerOfAHandlerThatPanickedAfterWriting(t *testing.T) {
	srv, _ := countServer(t, Options{
		Policy: &Policy{Algorithm: "fixed_window", Rate: "2/h"},
		Count:  []string{"successful"}, Prefix: fmt.Sprintf("go-count-ended-%d", time.Now().UnixNano()),
	})
	for i := 0; i < 3; i++ {
		countGet(t, srv, "panic") // no response: free under successful
	}
	for i := 0; i < 2; i++ {
		countGet(t, srv, "writepanic")
	}
	if status, _ := countGet(t, srv, "status=200"); status != 429 {
		t.Fatalf("after two answered 200s on 2/h: %d", status)
	}
}

// Limiter.Complete and Outcome.Completion, and their errors.
func TestCompleteAndTheOutcomeToken(t *testing.T) {
	l, err := New(Options{Policy: &Policy{Algorithm: "sliding_window_log", Rate: "2/h"}, Count: []string{"4xx", "503"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := int64(1_700_000_000_000)
	req := &RequestInfo{Method: "POST", Path: "/x", Peer: "203.0.113.7", NowMs: &now}
	ctx := context.Background()
	o, err := l.CheckRequest(ctx, req)
	if err != nil || !strings.HasPrefix(o.Completion, "pl1;") {
		t.Fatalf("%+v %v", o, err)
	}
	if err := l.Complete(ctx, o.Completion, 500); err != nil { // not counted: given back
		t.Fatal(err)
	}
	for _, status := range []int{0, 404} { // no response, and a 4xx: counted
		o, _ := l.CheckRequest(ctx, req)
		if err := l.Complete(ctx, o.Completion, status); err != nil {
			t.Fatal(err)
		}
	}
	if o, _ := l.CheckRequest(ctx, req); o.Status != 429 || o.Completion != "" {
		t.Fatalf("%+v", o)
	}
	var cerr *ConfigError
	if err := l.Complete(ctx, "not a token", 200); !errors.As(err, &cerr) || cerr.Field != "token" {
		t.Fatalf("%v", err)
	}
	if _, err := New(Options{Policy: &Policy{Rate: "1/s"}, Count: []string{"sometimes"}}); !errors.As(err, &cerr) || !strings.HasPrefix(cerr.Field, "Count") {
		t.Fatalf("%v", err)
	}
}

// The recorder keeps what the wrapped writer offers through Hijack.
func TestStatusRecorderHijacks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		conn, buf, err := rec.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 204 No Content\r\n\r\n")
		_ = buf.Flush()
		if rec.status != http.StatusSwitchingProtocols {
			t.Errorf("status %d", rec.status)
		}
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 204 {
		t.Fatalf("%d", res.StatusCode)
	}
}
