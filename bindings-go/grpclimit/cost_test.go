package grpclimit_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// used is the actual cost a call asks its handler to report (its "used"
// metadata), and whether it asks for one.
func used(ctx context.Context) (int64, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("used"); len(v) > 0 {
		n, err := strconv.ParseInt(v[0], 10, 64)
		return n, err == nil
	}
	return 0, false
}

// report reports the call's actual cost on ctx, the handler's; an error
// when ReportCost finds no call.
func report(ctx context.Context) error {
	if n, ok := used(ctx); ok && !polylimit.ReportCost(ctx, n) {
		return status.Error(codes.Internal, "no call to report the cost of")
	}
	return nil
}

// llm is a service whose Chat (unary) and ChatStream (server stream)
// handlers report the call's actual cost.
var llm = grpc.ServiceDesc{ServiceName: "polylimit.demo.LLM", HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Chat", Handler: func(_ any, ctx context.Context, dec func(any) error, next grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		return next(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/polylimit.demo.LLM/Chat"}, func(ctx context.Context, req any) (any, error) {
			if err := report(ctx); err != nil {
				return nil, err
			}
			return wrapperspb.String("answered"), nil
		})
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "ChatStream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		if err := report(ss.Context()); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String("answered"))
	}}},
}

// chat makes one call (unary, or a server stream) with the x-reserve and
// used metadata given ("" for none): its code and x-ratelimit-remaining.
func chat(t *testing.T, conn *grpc.ClientConn, unary bool, reserve, use string) (codes.Code, int) {
	t.Helper()
	md := metadata.Pairs("x-api-key", "k1")
	if reserve != "" {
		md.Set("x-reserve", reserve)
	}
	if use != "" {
		md.Set("used", use)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	var header metadata.MD
	var err error
	if unary {
		err = conn.Invoke(ctx, "/polylimit.demo.LLM/Chat", wrapperspb.String("q"), new(wrapperspb.StringValue), grpc.Header(&header))
	} else {
		var stream grpc.ClientStream
		stream, err = conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/polylimit.demo.LLM/ChatStream")
		if err == nil {
			if err = stream.SendMsg(wrapperspb.String("q")); err == nil {
				err = stream.CloseSend()
			}
		}
		for err == nil {
			err = stream.RecvMsg(new(wrapperspb.StringValue))
		}
		if err == io.EOF {
			err = nil
		}
		if stream != nil {
			header, _ = stream.Header()
		}
	}
	remaining := -1
	if v := header.Get("x-ratelimit-remaining"); len(v) > 0 {
		remaining, _ = strconv.Atoi(v[0])
	}
	return status.Code(err), remaining
}

// The handler reports the call's actual cost with polylimit.ReportCost on
// its ctx (a stream's ss.Context()): the interceptor completes the call with
// it, and the next calls see the difference charged or given back. The
// same steps as adaptertest.PlayCost, on memory and a real Redis.
func TestTheReportedCostIsSettled(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		for _, unary := range []bool{true, false} {
			name := store + "/stream"
			if unary {
				name = store + "/unary"
			}
			t.Run(name, func(t *testing.T) {
				l, err := polylimit.FromRules(adaptertest.CostRules(url, "go-grpc-cost-"+name, "/polylimit.demo.LLM/*"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(l)),
					grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l)))
				srv.RegisterService(&llm, struct{}{})
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
				// A token refills every 8.64 s: allow two.
				near := func(got, want int) bool { return got >= want && got <= want+2 }
				if c, rem := chat(t, conn, unary, "", "3400"); c != codes.OK || rem != 9000 {
					t.Fatalf("reserving 1000: %v, remaining %d (want OK, 9000; Internal: ReportCost found no call)", c, rem)
				}
				if c, rem := chat(t, conn, unary, "", "200"); c != codes.OK || !near(rem, 5600) {
					t.Fatalf("after 3400 were used: %v, remaining %d, want OK, 5600", c, rem)
				}
				if c, rem := chat(t, conn, unary, "1", "1"); c != codes.OK || !near(rem, 6399) {
					t.Fatalf("after 200 of 1000 were used: %v, remaining %d, want OK, 6399 (800 given back)", c, rem)
				}
				if c, _ := chat(t, conn, unary, "0", ""); c != codes.InvalidArgument {
					t.Fatalf("a bad reservation: %v, want InvalidArgument", c)
				}
				if c, rem := chat(t, conn, unary, "1000", "4000"); c != codes.OK || !near(rem, 5399) {
					t.Fatalf("reserving 1000: %v, remaining %d, want OK, 5399", c, rem)
				}
				if c, _ := chat(t, conn, unary, "2500", ""); c != codes.ResourceExhausted {
					t.Fatalf("after 4000 of 1000 were used: %v, want ResourceExhausted", c)
				}
				if c, rem := chat(t, conn, unary, "2300", ""); c != codes.OK || !near(rem, 99) {
					t.Fatalf("2300 of the 2399 left: %v, remaining %d, want OK, 99", c, rem)
				}
			})
		}
	}
}
