// grpc-go + polylimit: the Greeter and Llm demo services (examples/grpc/greeter.proto),
// every call decided by the shared rules file. No generated code: the
// service is a hand-written grpc.ServiceDesc on the well-known
// google.protobuf.StringValue.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"github.com/polylimit/polylimit/examples/go/demo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// greeter is polylimit.demo.Greeter.
var greeter = grpc.ServiceDesc{
	ServiceName: "polylimit.demo.Greeter",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Hello", Handler: hello}},
	Streams:     []grpc.StreamDesc{{StreamName: "HelloStream", Handler: helloStream, ServerStreams: true}},
	Metadata:    "greeter.proto",
}

// hello replies "hello, <value>".
func hello(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	handler := func(ctx context.Context, req any) (any, error) {
		return wrapperspb.String("hello, " + req.(*wrapperspb.StringValue).GetValue()), nil
	}
	if interceptor == nil {
		return handler(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.Greeter/Hello"}, handler)
}

// llm is polylimit.demo.Llm: an LLM-style call, its own service so the
// Greeter's rules do not match it.
var llm = grpc.ServiceDesc{
	ServiceName: "polylimit.demo.Llm",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Generate", Handler: generate}},
	Metadata:    "greeter.proto",
}

// generate reports the x-actual-cost metadata (the tokens the model used) as
// the call's actual cost and replies "generated, <value>".
func generate(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	handler := func(ctx context.Context, req any) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-actual-cost"); len(v) > 0 {
			if n, err := strconv.ParseInt(v[0], 10, 64); err == nil {
				polylimit.ReportCost(ctx, n)
			}
		}
		return wrapperspb.String("generated, " + req.(*wrapperspb.StringValue).GetValue()), nil
	}
	if interceptor == nil {
		return handler(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.Llm/Generate"}, handler)
}

// helloStream replies "hello, <value> <i>" for i = 0, 1, 2.
func helloStream(_ any, stream grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	for i := range 3 {
		if err := stream.SendMsg(wrapperspb.String(fmt.Sprintf("hello, %s %d", in.GetValue(), i))); err != nil {
			return err
		}
	}
	return nil
}

// user is the x-user metadata: stands in for your auth.
func user(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-user"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func main() {
	limiter, err := polylimit.FromFile(demo.Rules())
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	opt := grpclimit.WithUserFunc(user)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter, opt)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter, opt)))
	srv.RegisterService(&greeter, struct{}{})
	srv.RegisterService(&llm, struct{}{})
	ln, err := net.Listen("tcp", demo.Addr())
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("grpc-go Greeter on %s", demo.Addr())
	log.Fatal(srv.Serve(ln))
}
