// The clean room's net/http app: polylimit from the Go module proxy, one policy;
// /version also reports a Retry-After value read by the client package (cgo, the same core).
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/client"
)

func main() {
	store := os.Getenv("REDIS_URL")
	if store == "" {
		store = "memory"
	}
	limiter, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "10/hour"}, Store: store,
		Timeout: 10 * time.Second}) // decisions, not latency: a loaded CI host must not fall back
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	mux := http.NewServeMux()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"hello": "world"})
	})
	mux.Handle("GET /hello", limiter.Middleware()(hello))
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		wait, _ := client.ParseRetryAfter("7", time.Now())
		_ = json.NewEncoder(w).Encode(map[string]any{"version": polylimit.Version, "client_retry_after_ms": wait.Milliseconds()})
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux))
}
