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
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		text, _ := limiter.Metrics()
		_, _ = io.WriteString(w, text)
	})
	user := polylimit.WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") }) // stands in for your auth

	addr := "127.0.0.1:" + envOr("PORT", "8080")
	log.Printf("go example on http://%s", addr)
	log.Fatal(http.ListenAndServe(addr, limiter.Middleware(user)(mux)))
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
