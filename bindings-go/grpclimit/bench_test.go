package grpclimit_test

import (
	"context"
	"testing"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

type benchAddr string

func (a benchAddr) Network() string { return "tcp" }
func (a benchAddr) String() string  { return string(a) }

// The unary interceptor's own cost per call on memory, without a network
// (go test -bench . -run ^$): the call's context as grpc-go builds it.
func BenchmarkUnaryInterceptorMemory(b *testing.B) {
	l, err := polylimit.New(polylimit.Options{Policy: &polylimit.Policy{Name: "api", Rate: "1000000000/s", Burst: 1000000000}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	unary := grpclimit.UnaryServerInterceptor(l)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: benchAddr("203.0.113.7:5555")})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(":authority", "localhost", "content-type", "application/grpc",
		"user-agent", "grpc-go/1.85.0"))
	info := &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.Greeter/Hello"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := unary(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
