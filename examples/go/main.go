// Go net/http + polylimit: every request is decided by the shared rules file.
package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"

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
