// The clean room's gin app: polylimit and its gin adapter (a module of its own) from the Go module proxy, one policy;
// /version also reports a Retry-After value read by the client package (cgo, the same core).
package main

import (
	"encoding/json"
	"log"
	"os"
	"time"

	"github.com/gin-gonic/gin"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/client"
	"github.com/polylimit/polylimit/bindings-go/ginlimit"
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

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/hello", ginlimit.New(limiter), func(c *gin.Context) {
		_ = json.NewEncoder(c.Writer).Encode(map[string]string{"hello": "world"})
	})
	r.GET("/version", func(c *gin.Context) {
		wait, _ := client.ParseRetryAfter("7", time.Now())
		_ = json.NewEncoder(c.Writer).Encode(map[string]any{"version": polylimit.Version, "client_retry_after_ms": wait.Milliseconds()})
	})
	log.Fatal(r.Run("127.0.0.1:" + os.Getenv("PORT")))
}
