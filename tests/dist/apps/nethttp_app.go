// The clean room's net/http app: polylimit from the Go module proxy, one policy.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"

	polylimit "github.com/polylimit/polylimit/bindings-go"
)

func main() {
	store := os.Getenv("REDIS_URL")
	if store == "" {
		store = "memory"
	}
	limiter, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "10/hour"}, Store: store})
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
		_ = json.NewEncoder(w).Encode(map[string]string{"version": polylimit.Version})
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux))
}
