// Package demo is what every Go example app (net/http, gin, echo) answers,
// so that they answer alike, byte for byte: only the routing and the
// polylimit adapter differ between them.
package demo

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// Rules is the rules file the apps load: $POLYLIMIT_RULES, else the examples' own.
func Rules() string { return EnvOr("POLYLIMIT_RULES", "../polylimit.yaml") }

// Addr is the loopback address to listen on: $PORT, else 8080.
func Addr() string { return "127.0.0.1:" + EnvOr("PORT", "8080") }

// Password is the demo's one account password; a real app checks its user store.
const Password = "open-sesame"

// Login answers POST /login: the X-Login-User header and a JSON body with
// the password. The rules file's login rule counts only failed logins (the
// 401 here); successful ones are given back.
func Login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Password string `json:"password"`
	}
	user := r.Header.Get("X-Login-User")
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || user == "" || body.Password != Password {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"wrong user or password"}`)
		return
	}
	Reply(w, map[string]string{"logged_in": user})
}

// Report answers GET /reports/{id}, a slow report under the rules file's
// reports rule (at most 10 in flight per client): held ms milliseconds
// (default 300), or until the client goes; fail=1 then panics. Stats counts
// the requests inside it, the app's own measure of what the limit lets in.
func Report(w http.ResponseWriter, r *http.Request, id string) {
	Stats.enter()
	select {
	case <-time.After(holdMs(r.URL.Query().Get("ms"))):
	case <-r.Context().Done():
	}
	Stats.leave()
	if r.URL.Query().Get("fail") == "1" {
		panic("report " + id + " failed")
	}
	Reply(w, map[string]string{"report": id})
}

// StatsAnswer answers GET /stats (reset false) and DELETE /stats (reset true).
func StatsAnswer(w http.ResponseWriter, reset bool) { Reply(w, Stats.read(reset)) }

// gauge counts the requests inside a handler.
type gauge struct {
	mu                             sync.Mutex
	inFlight, maxInFlight, started int
}

// Stats is the report handler's gauge.
var Stats gauge

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

// Reply answers body as JSON.
func Reply(w http.ResponseWriter, body any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// EnvOr is $name, or fallback when unset or empty.
func EnvOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
