// Go net/http + polylimit: every request is decided by the shared rules file.
package main

import (
	"io"
	"log"
	"net/http"
	"strconv"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/examples/go/demo"
)

func main() {
	limiter, err := polylimit.FromFile(demo.Rules())
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/{name}", func(w http.ResponseWriter, r *http.Request) {
		demo.Reply(w, map[string]string{"hello": r.PathValue("name")})
	})
	mux.HandleFunc("POST /api/payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		demo.Reply(w, map[string]string{"paid": r.PathValue("id")})
	})
	// An LLM-style endpoint: the rules file's llm rule reserves the X-Reserve header's cost before
	// the handler; the handler reports the actual cost (here X-Actual-Cost, in a real app the
	// model's token usage) and the middleware reconciles after the response.
	mux.HandleFunc("POST /api/llm", func(w http.ResponseWriter, r *http.Request) {
		if actual, err := strconv.ParseInt(r.Header.Get("X-Actual-Cost"), 10, 64); err == nil {
			polylimit.ReportCost(r.Context(), actual)
		}
		demo.Reply(w, map[string]bool{"answered": true})
	})
	mux.HandleFunc("POST /login", demo.Login)
	// A panicking report (fail=1): net/http recovers it and drops the connection.
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		demo.Report(w, r, r.PathValue("id"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) { demo.StatsAnswer(w, false) })
	mux.HandleFunc("DELETE /stats", func(w http.ResponseWriter, r *http.Request) { demo.StatsAnswer(w, true) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		text, _ := limiter.Metrics()
		_, _ = io.WriteString(w, text)
	})
	user := polylimit.WithUserFunc(func(r *http.Request) string { return r.Header.Get("X-User") }) // stands in for your auth

	log.Printf("go example on http://%s", demo.Addr())
	log.Fatal(http.ListenAndServe(demo.Addr(), limiter.Middleware(user)(mux)))
}
