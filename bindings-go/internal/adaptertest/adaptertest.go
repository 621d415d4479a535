// Package adaptertest plays the HTTP conformance vectors (tests/conformance/http)
// and the cost vectors (tests/conformance/cost) through a router adapter
// (ginlimit, echolimit), on memory and on a real Redis, for those adapters'
// tests. Not part of the released module.
package adaptertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
)

// VectorDir is $POLYLIMIT_VECTORS, or the checkout's tests/conformance.
func VectorDir() string {
	if base := os.Getenv("POLYLIMIT_VECTORS"); base != "" {
		return base
	}
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "tests", "conformance")
}

// Files decodes every $VectorDir/<sub>/*.json into a new value of into's
// kind (unknown fields fail), by file name.
func Files[T any](t testing.TB, sub string) map[string]*T {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(VectorDir(), sub, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vectors in %s (%v)", filepath.Join(VectorDir(), sub), err)
	}
	sort.Strings(paths)
	out := map[string]*T{}
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		v := new(T)
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = v
	}
	return out
}

// HTTPFile is one file of tests/conformance/http (its README has the format).
type HTTPFile struct {
	Cases []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Rules       json.RawMessage `json:"rules"`
		Requests    []Step          `json:"requests"`
	} `json:"cases"`
}

// Step is one request of a case, or the completion of an earlier one (Of).
type Step struct {
	Request  json.RawMessage `json:"request"`
	Complete json.RawMessage `json:"complete"`
	Of       *int            `json:"of"`
	Peek     bool            `json:"peek"`
	// cost/: the actual cost the handler reports (polylimit.ReportCost)
	// before it answers, and the completion's clock (default: the request's).
	ActualCost *int64 `json:"actual_cost"`
	AtMs       *int64 `json:"at_ms"`
	Expect     struct {
		Status   *int        `json:"status"`
		Headers  [][2]string `json:"headers"`
		Trailers [][2]string `json:"trailers"`
		Body     *string     `json:"body"`
		DelayMs  uint64      `json:"delay_ms"`
	} `json:"expect"`
}

// Request is a vector's request object.
type Request struct {
	polylimit.RequestInfo
	Kind string `json:"kind"`
}

// DecodeRequest reads a vector's request (headers as an object, in order,
// or as a list of pairs); unknown fields fail.
func DecodeRequest(t testing.TB, raw json.RawMessage) *Request {
	t.Helper()
	var r struct {
		Request
		Headers json.RawMessage `json:"headers"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("request %s: %v", raw, err)
	}
	out := r.Request
	if len(r.Headers) > 0 && r.Headers[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(r.Headers))
		_, _ = dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v string
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("request headers %s: %v", r.Headers, err)
			}
			out.Headers = append(out.Headers, [2]string{k.(string), v})
		}
	} else if len(r.Headers) > 0 {
		if err := json.Unmarshal(r.Headers, &out.Headers); err != nil {
			t.Fatalf("request headers %s: %v", r.Headers, err)
		}
	}
	return &out
}

// CompleteStatus reads a step's "complete": a status, or nil for JSON null (no response).
func CompleteStatus(t testing.TB, raw json.RawMessage) *int {
	t.Helper()
	var status *int
	if err := json.Unmarshal(raw, &status); err != nil {
		t.Fatalf("complete %s: %v", raw, err)
	}
	return status
}

// Limiter builds a case's rules on store, isolated by prefix.
func Limiter(t testing.TB, rules json.RawMessage, store, prefix string) *polylimit.Limiter {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rules, &m); err != nil {
		t.Fatal(err)
	}
	m["store"], m["prefix"] = store, prefix
	if _, set := m["timeout"]; !set {
		m["timeout"] = "10s" // decisions, not latency, are under test
	}
	text, _ := json.Marshal(m)
	l, err := polylimit.FromRules(string(text))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Adapter serves handler behind the adapter under test, with opts given to
// the adapter (the vector's user, key, cost, route and clock).
type Adapter func(l *polylimit.Limiter, opts []polylimit.MiddlewareOption, handler http.Handler) http.Handler

type vectorKey struct{}

// a request in flight: the handler signals entered with the headers the
// adapter set, then ends as release says.
type inFlight struct {
	entered chan http.Header
	release chan ending
	done    chan struct{}
	rec     *httptest.ResponseRecorder
	start   time.Time
}

// PlayHTTP plays every HTTP and cost vector through adapter on store.
// Peeks are skipped (an adapter never peeks, and a peek charges nothing),
// and so are the cases of routers that ignore case or a trailing slash
// (gin's and echo's routers do neither). A cost vector's actual cost is
// reported by the handler (polylimit.ReportCost on its request's context),
// its at_ms given to the completion through WithNowFunc.
func PlayHTTP(t *testing.T, store string, adapter Adapter) {
	files := Files[HTTPFile](t, "http")
	for name, file := range Files[HTTPFile](t, "cost") {
		files["cost/"+name] = file
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	opts := []polylimit.MiddlewareOption{
		polylimit.WithUserFunc(func(r *http.Request) string { return info(r).User }),
		polylimit.WithAPIKeyFunc(func(r *http.Request) string { return info(r).APIKey }),
		polylimit.WithKeyFunc(func(r *http.Request) string { return info(r).Key }),
		polylimit.WithCostFunc(func(r *http.Request) uint64 { return info(r).Cost }),
		polylimit.WithRouteFunc(func(r *http.Request) string { return info(r).Route }),
		polylimit.WithNowFunc(func(r *http.Request) time.Time { return time.UnixMilli(*info(r).NowMs) }),
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := r.Context().Value(flightKey{}).(*inFlight)
		f.entered <- w.Header().Clone()
		e := <-f.release
		if e.cost != nil && !polylimit.ReportCost(r.Context(), *e.cost) {
			http.Error(w, "ReportCost: no request to report the cost of", http.StatusInternalServerError)
			return
		}
		if e.status == nil {
			panic(http.ErrAbortHandler) // no response, and no stack trace in the log
		}
		w.WriteHeader(*e.status)
	})
	played, skipped := 0, 0
	for fi, name := range names {
	cases:
		for ci, c := range files[name].Cases {
			where := fmt.Sprintf("%s: %s: %q", store, name, c.Name)
			steps := make([]*Request, len(c.Requests))
			for i, s := range c.Requests {
				if s.Request != nil {
					steps[i] = DecodeRequest(t, s.Request)
					if steps[i].CaseInsensitive || steps[i].IgnoreTrailingSlash {
						skipped++
						continue cases
					}
				}
			}
			l := Limiter(t, c.Rules, store, fmt.Sprintf("go-adapter-%d-%d-%d", fi, ci, time.Now().UnixNano()))
			h := adapter(l, opts, handler)
			flights := make([]*inFlight, len(c.Requests))
			ended := make([]bool, len(c.Requests))
			for i, s := range c.Requests {
				if s.Of != nil {
					f := flights[*s.Of]
					if ended[*s.Of] {
						continue // a request ends once: completing it again gives nothing back
					}
					if f == nil {
						t.Errorf("%s step %d: request %d was not let through", where, i, *s.Of)
						continue
					}
					end(t, f, steps[*s.Of], s)
					flights[*s.Of], ended[*s.Of] = nil, true
					continue
				}
				if s.Peek {
					continue
				}
				played++
				req := steps[i]
				f := serve(h, req)
				status, header, body := 0, http.Header(nil), ""
				select {
				case header = <-f.entered:
					if took := time.Since(f.start); s.Expect.DelayMs > 0 && took < time.Duration(s.Expect.DelayMs)*time.Millisecond {
						t.Errorf("%s step %d: served after %v, want a delay of %d ms", where, i, took, s.Expect.DelayMs)
					}
					flights[i] = f
				case <-f.done:
					res := f.rec.Result()
					status, header, body = res.StatusCode, res.Header, f.rec.Body.String()
					if header.Get("Content-Type") != "application/json" {
						t.Errorf("%s step %d: refusal Content-Type %q", where, i, header.Get("Content-Type"))
					}
					header.Del("Content-Type")
				}
				want := 0
				if s.Expect.Status != nil {
					want = *s.Expect.Status
				}
				wantBody := ""
				if s.Expect.Body != nil {
					wantBody = *s.Expect.Body
				}
				if status != want || body != wantBody || !SameHeaders(header, s.Expect.Headers) {
					t.Errorf("%s step %d: expected status %d headers %v body %q, got %d %v %q",
						where, i, want, s.Expect.Headers, wantBody, status, header, body)
				}
				if s.Complete != nil && flights[i] != nil {
					end(t, f, req, s)
					flights[i], ended[i] = nil, true
				}
			}
			// Requests nobody completed stay in flight to the end of the case.
			ok := 200
			for _, f := range flights {
				if f != nil {
					f.release <- ending{status: &ok}
					<-f.done
				}
			}
			l.Close()
		}
	}
	t.Logf("%d requests played through the adapter on %s; %d cases of case-insensitive or slash-ignoring routers skipped", played, store, skipped)
}

type flightKey struct{}

// ending is how a request in flight ends: the status its handler answers
// (nil: it panics with nothing written), after reporting cost when set.
type ending struct {
	status *int
	cost   *int64
}

// end releases f, the flight of req, as step s says and waits for its
// end; s.AtMs, the completion's clock, is set on req first.
func end(t testing.TB, f *inFlight, req *Request, s Step) {
	if s.AtMs != nil {
		at := *s.AtMs
		req.NowMs = &at // read by the adapter's WithNowFunc once the handler is done
	}
	f.release <- ending{status: CompleteStatus(t, s.Complete), cost: s.ActualCost}
	<-f.done
}

// serve sends req to h on a goroutine of its own, as a server would (a
// panic ends the request, never the test).
func serve(h http.Handler, req *Request) *inFlight {
	f := &inFlight{entered: make(chan http.Header, 1), release: make(chan ending, 1), done: make(chan struct{}),
		rec: httptest.NewRecorder(), start: time.Now()}
	method, target := req.Method, req.Path
	if method == "" {
		method = "GET"
	}
	if target == "" {
		target = "/"
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		panic(fmt.Sprintf("vector path %q: %v", target, err))
	}
	r := &http.Request{Method: method, URL: u, RequestURI: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Host: "example.test", RemoteAddr: req.Peer}
	for _, h := range req.Headers {
		r.Header.Add(h[0], h[1])
	}
	ctx := context.WithValue(context.WithValue(context.Background(), vectorKey{}, req), flightKey{}, f)
	r = r.WithContext(ctx)
	go func() {
		defer close(f.done)
		defer func() { _ = recover() }()
		h.ServeHTTP(f.rec, r)
	}()
	return f
}

func info(r *http.Request) *Request { return r.Context().Value(vectorKey{}).(*Request) }

// SameHeaders: h holds exactly the want pairs (names in any case, each
// name's values in order), and nothing else.
func SameHeaders(h http.Header, want [][2]string) bool {
	w := http.Header{}
	for _, p := range want {
		w.Add(p[0], p[1])
	}
	if len(w) != len(h) {
		return false
	}
	for k, v := range w {
		if fmt.Sprint(h[textproto.CanonicalMIMEHeaderKey(k)]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}
