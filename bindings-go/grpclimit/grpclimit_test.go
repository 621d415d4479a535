package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A Greeter whose Hello panics for "panic" and whose HelloStream sends one
// message, then waits for its client to go (entered signals it is inside).
func greeter(entered chan<- struct{}) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{ServiceName: "polylimit.demo.Greeter", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Hello", Handler: func(_ any, ctx context.Context, dec func(any) error, next grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return next(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.Greeter/Hello"}, func(ctx context.Context, req any) (any, error) {
				if req.(*wrapperspb.StringValue).GetValue() == "panic" {
					panic("the handler failed")
				}
				return wrapperspb.String("hello"), nil
			})
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "HelloStream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.SendMsg(wrapperspb.String("hello")); err != nil {
				return err
			}
			entered <- struct{}{}
			<-ss.Context().Done()
			return ss.Context().Err()
		}}},
	}
}

// recovered answers a panic INTERNAL, as grpc-ecosystem's recovery interceptor does.
func recovered(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if recover() != nil {
			resp, err = nil, status.Error(codes.Internal, "panic")
		}
	}()
	return h(ctx, req)
}

// One slot per client, with a lease of an hour on a real Redis: a slot
// that a call did not give back refuses the next call for that hour.
func TestSlotsComeBackAfterAPanicAndAClientsCancel(t *testing.T) {
	l, err := polylimit.FromRules(`
store: ` + adaptertest.StartRedis(t).URL + `
policies:
  slots: { algorithm: concurrency, limit: 1, lease: 1h }
rules:
  - { match: { path: /polylimit.demo.Greeter/* }, key: [ip], policy: slots }
`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	entered := make(chan struct{}, 1)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovered, grpclimit.UnaryServerInterceptor(l)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l)))
	srv.RegisterService(greeter(entered), struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello := func(value string) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return status.Code(conn.Invoke(ctx, "/polylimit.demo.Greeter/Hello", wrapperspb.String(value), new(wrapperspb.StringValue)))
	}
	for i := 0; i < 3; i++ {
		if code := hello("panic"); code != codes.Internal {
			t.Fatalf("panic %d: %v, want Internal (a refused call would be ResourceExhausted)", i, code)
		}
	}
	// A stream holds the slot while it is open...
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/polylimit.demo.Greeter/HelloStream")
	if err == nil {
		if err = stream.SendMsg(wrapperspb.String("w")); err == nil {
			err = stream.CloseSend()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if code := hello("x"); code != codes.ResourceExhausted {
		t.Fatalf("while the stream is open: %v, want ResourceExhausted", code)
	}
	// ...and gives it back when its client cancels.
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for hello("x") != codes.OK {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled stream's slot never came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
