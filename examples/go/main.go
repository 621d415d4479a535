// Go net/http + polylimit: every request is decided by the shared rules file.
package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
)

func main() {
	rules := os.Getenv("POLYLIMIT_RULES")
	if rules == "" {
		rules = "../polylimit.yaml"
	}
	limiter, err := polylimit.FromFile(rules)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"hello": r.PathValue("name")})
	})
	mux.HandleFunc("POST /api/payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"paid": r.PathValue("id")})
	})
	// The rules file's login rule keys by IP and the X-Login-User header, and
	// counts only failed logins (a 401 here); successful ones are given back.
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Password string `json:"password"`
		}
		user := r.Header.Get("X-Login-User")
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || user == "" || body.Password != demoPassword {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"wrong user or password"}`)
			return
		}
		reply(w, map[string]string{"logged_in": user})
	})
	// A slow report under the rules file's reports rule (at most 10 in flight
	// per client): held ms milliseconds (default 300), or until the client
	// goes; fail=1 then panics (net/http recovers it and drops the connection).
	// stats counts the requests inside the handler, the app's own measure of
	// what the limit lets in.
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		stats.enter()
		select {
		case <-time.After(holdMs(r.URL.Query().Get("ms"))):
		case <-r.Context().Done():
		}
		stats.leave()
		if r.URL.Query().Get("fail") == "1" {
			panic("report " + r.PathValue("id") + " failed")
		}
		reply(w, map[string]string{"report": r.PathValue("id")})
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		reply(w, stats.read(false))
	})
	mux.HandleFunc("DELETE /stats", func(w http.ResponseWriter, r *http.Request) {
		reply(w, stats.read(true))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		text, _ := limiter.Metrics()
		_, _ = io.WriteString(w, text)
	})
	user := polylimit.WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") }) // stands in for your auth

	addr := "127.0.0.1:" + envOr("PORT", "8080")
	log.Printf("go example on http://%s", addr)
	log.Fatal(http.ListenAndServe(addr, limiter.Middleware(user)(mux)))
}

// demoPassword is the demo's one account password; a real app checks its user store.
const demoPassword = "open-sesame"

// gauge counts the requests inside a handler.
type gauge struct {
	mu                             sync.Mutex
	inFlight, maxInFlight, started int
}

var stats gauge

func (g *gauge) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight++
	g.started++
	g.maxInFlight = max(g.maxInFlight, g.inFlight)
}

func (g *gauge) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
}

// read returns the counts; reset starts the maximum and the count of
// started requests over.
func (g *gauge) read(reset bool) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if reset {
		g.maxInFlight, g.started = g.inFlight, 0
	}
	return map[string]int{"in_flight": g.inFlight, "max_in_flight": g.maxInFlight, "started": g.started}
}

// holdMs is the ms query parameter as a duration: 300 ms by default, at most 30 s.
func holdMs(ms string) time.Duration {
	n, err := strconv.Atoi(ms)
	if err != nil {
		n = 300
	}
	return time.Duration(min(max(n, 0), 30000)) * time.Millisecond
}

func reply(w http.ResponseWriter, body any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
