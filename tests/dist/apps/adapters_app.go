// The clean room's check of the echo and gRPC adapters (modules of their own,
// released beside polylimit): each built on the released module, one policy on
// memory, 3 requests through echo and 3 calls through the unary interceptor
// (burst 2): prints "echo 200 200 429" and "grpc OK OK ResourceExhausted".
package main

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/labstack/echo/v4"
	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/echolimit"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

func main() {
	limiter, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "2/hour"}})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	e := echo.New()
	e.Use(echolimit.New(limiter))
	e.GET("/hello", func(c echo.Context) error { return c.String(200, "hello") })
	fmt.Print("echo")
	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Print(" ", w.Code)
	}
	unary := grpclimit.UnaryServerInterceptor(limiter)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr("203.0.113.9:5")})
	info := &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.Greeter/Hello"}
	fmt.Print("\ngrpc")
	for range 3 {
		_, err := unary(ctx, nil, info, func(context.Context, any) (any, error) { return "hello", nil })
		fmt.Print(" ", status.Code(err))
	}
	fmt.Println()
}
