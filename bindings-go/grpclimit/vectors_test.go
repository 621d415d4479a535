package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/grpclimit"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// call is one vector call in flight: the handler signals entered, then ends
// with the code sent on release (nil: it panics, no status at all).
type call struct {
	req     *adaptertest.Request
	entered chan struct{}
	release chan *int
	done    chan answer
}

type answer struct {
	header, trailer metadata.MD
	err             error
}

type callKey struct{}

func callOf(ctx context.Context) *call { return ctx.Value(callKey{}).(*call) }

// stepHeader names the vector call a test client's call plays; the test's
// outer interceptor takes it out of the metadata and gives the call the
// vector's peer, as a proxy-free client at that address would have.
const stepHeader = "x-vector-step"

type vectorPeer string

func (p vectorPeer) Network() string { return "tcp" }
func (p vectorPeer) String() string  { return string(p) }

// calls is the registry the outer interceptor reads.
type calls struct {
	mu sync.Mutex
	m  map[string]*call
}

func (c *calls) enter(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	step := md.Get(stepHeader)
	if len(step) != 1 {
		return ctx, status.Error(codes.Internal, "no vector step")
	}
	c.mu.Lock()
	v := c.m[step[0]]
	c.mu.Unlock()
	md = md.Copy()
	delete(md, stepHeader)
	ctx = metadata.NewIncomingContext(ctx, md)
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: vectorPeer(v.req.Peer)})
	return context.WithValue(ctx, callKey{}, v), nil
}

// outer interceptors: the vector's call into the context; a panic (a
// handler's "no status") is answered INTERNAL instead of ending the test.
func (c *calls) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	if ctx, err = c.enter(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if recover() != nil {
			resp, err = nil, status.Error(codes.Internal, "the handler panicked")
		}
	}()
	return h(ctx, req)
}

type withContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s withContext) Context() context.Context { return s.ctx }

func (c *calls) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	ctx, err := c.enter(ss.Context())
	if err != nil {
		return err
	}
	defer func() {
		if recover() != nil {
			err = status.Error(codes.Internal, "the handler panicked")
		}
	}()
	return h(srv, withContext{ss, ctx})
}

// end is how a vector's handler ends: the code the harness sends.
func end(ctx context.Context) error {
	v := callOf(ctx)
	v.entered <- struct{}{}
	code := <-v.release
	if code == nil {
		panic("no status")
	}
	if *code == 0 {
		return nil
	}
	return status.Error(codes.Code(*code), "the handler's error")
}

func unaryHandler(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) {
		if err := end(ctx); err != nil {
			return nil, err
		}
		return wrapperspb.String("hello, " + req.(*wrapperspb.StringValue).GetValue()), nil
	}
	method, _ := grpc.Method(ctx)
	return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, h)
}

func streamHandler(_ any, ss grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	if err := end(ss.Context()); err != nil {
		return err
	}
	return ss.SendMsg(wrapperspb.String("hello, " + in.GetValue()))
}

// serve starts a gRPC server on a loopback TCP port with the interceptor
// under test: unary, every path of the case a unary method; else every
// path a server stream (the unknown-service handler takes them all).
func serve(t *testing.T, l *polylimit.Limiter, unary bool, paths []string, reg *calls) *grpc.ClientConn {
	opts := []grpclimit.Option{
		grpclimit.WithUserFunc(func(ctx context.Context) string { return callOf(ctx).req.User }),
		grpclimit.WithAPIKeyFunc(func(ctx context.Context) string { return callOf(ctx).req.APIKey }),
		grpclimit.WithKeyFunc(func(ctx context.Context) string { return callOf(ctx).req.Key }),
		grpclimit.WithCostFunc(func(ctx context.Context) uint64 { return callOf(ctx).req.Cost }),
		grpclimit.WithNowFunc(func(ctx context.Context) time.Time { return time.UnixMilli(*callOf(ctx).req.NowMs) }),
	}
	var srv *grpc.Server
	if unary {
		srv = grpc.NewServer(grpc.ChainUnaryInterceptor(reg.unary, grpclimit.UnaryServerInterceptor(l, opts...)))
		services := map[string][]string{}
		for _, p := range paths {
			i := strings.LastIndex(p, "/")
			service := strings.TrimPrefix(p[:i], "/")
			services[service] = append(services[service], p[i+1:])
		}
		for service, methods := range services {
			desc := grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
			sort.Strings(methods)
			for _, m := range slicesCompact(methods) {
				desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: m, Handler: unaryHandler})
			}
			srv.RegisterService(&desc, struct{}{})
		}
	} else {
		srv = grpc.NewServer(grpc.ChainStreamInterceptor(reg.stream, grpclimit.StreamServerInterceptor(l, opts...)),
			grpc.UnknownServiceHandler(streamHandler))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// send makes the vector's call from a client: unary, or a server stream read to its end.
func send(conn *grpc.ClientConn, unary bool, step int, v *call) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), stepHeader, fmt.Sprint(step))
	for _, h := range v.req.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, h[0], h[1])
	}
	go func() {
		var a answer
		in := wrapperspb.String("vector")
		if unary {
			a.err = conn.Invoke(ctx, v.req.Path, in, new(wrapperspb.StringValue), grpc.Header(&a.header), grpc.Trailer(&a.trailer))
		} else {
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, v.req.Path)
			if err == nil {
				if err = cs.SendMsg(in); err == nil {
					err = cs.CloseSend()
				}
				for err == nil {
					err = cs.RecvMsg(new(wrapperspb.StringValue))
				}
				a.header, _ = cs.Header()
				a.trailer = cs.Trailer()
			}
			if err.Error() != "EOF" {
				a.err = err
			}
		}
		v.done <- a
	}()
}

// same: md holds exactly the want pairs (content-type aside, which every response has).
func same(md metadata.MD, want [][2]string) bool {
	w := metadata.MD{}
	for _, p := range want {
		w.Append(p[0], p[1])
	}
	got := md.Copy()
	delete(got, "content-type")
	return fmt.Sprint(got) == fmt.Sprint(w) || (len(got) == 0 && len(w) == 0)
}

func play(t *testing.T, store string, unary bool) {
	files := adaptertest.Files[adaptertest.HTTPFile](t, "grpc")
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	played := 0
	for fi, name := range names {
		for ci, c := range files[name].Cases {
			where := fmt.Sprintf("%s: %s: %q", store, name, c.Name)
			reg := &calls{m: map[string]*call{}}
			var paths []string
			steps := make([]*call, len(c.Requests))
			for i, s := range c.Requests {
				if s.Request != nil {
					req := adaptertest.DecodeRequest(t, s.Request)
					if req.Kind != "grpc" {
						t.Fatalf("%s step %d: kind %q", where, i, req.Kind)
					}
					if !strings.HasPrefix(req.Path, "/") {
						req.Path = "/" + req.Path // grpc-java's form: a Go client always sends the "/"
					}
					steps[i] = &call{req: req, entered: make(chan struct{}, 1), release: make(chan *int, 1), done: make(chan answer, 1)}
					reg.m[fmt.Sprint(i)] = steps[i]
					paths = append(paths, req.Path)
				}
			}
			l := adaptertest.Limiter(t, c.Rules, store, fmt.Sprintf("go-grpc-%d-%d-%d", fi, ci, time.Now().UnixNano()))
			conn := serve(t, l, unary, paths, reg)
			inFlight := map[int]bool{}
			ended := map[int]bool{}
			finish := func(i int, code *int) {
				steps[i].release <- code
				inFlight[i], ended[i] = false, true
			}
			results := make([]answer, len(c.Requests))
			refused := make([]bool, len(c.Requests))
			for i, s := range c.Requests {
				if s.Of != nil {
					if !ended[*s.Of] {
						if !inFlight[*s.Of] {
							t.Errorf("%s step %d: call %d was not let through", where, i, *s.Of)
							continue
						}
						finish(*s.Of, adaptertest.CompleteStatus(t, s.Complete))
						results[*s.Of] = <-steps[*s.Of].done
					}
					continue
				}
				if s.Peek {
					continue
				}
				played++
				v := steps[i]
				send(conn, unary, i, v)
				select {
				case <-v.entered:
					inFlight[i] = true
					if s.Complete != nil {
						finish(i, adaptertest.CompleteStatus(t, s.Complete))
						results[i] = <-v.done
					}
				case results[i] = <-v.done:
					refused[i] = true
				}
			}
			ok := 0
			for i := range steps {
				if inFlight[i] {
					finish(i, &ok)
					results[i] = <-steps[i].done
				}
			}
			for i, s := range c.Requests {
				if steps[i] == nil || s.Peek {
					continue
				}
				e, a := s.Expect, results[i]
				want, body := 0, ""
				if e.Status != nil {
					want = *e.Status
				}
				if e.Body != nil {
					body = *e.Body
				}
				got, msg := 0, ""
				if refused[i] {
					st := status.Convert(a.err)
					got, msg = int(st.Code()), st.Message()
				}
				if got != want || msg != body || !same(a.header, e.Headers) || !same(a.trailer, e.Trailers) {
					t.Errorf("%s step %d: expected code %d message %q headers %v trailers %v, got %d %q %v %v (%v)",
						where, i, want, body, e.Headers, e.Trailers, got, msg, a.header, a.trailer, a.err)
				}
			}
			l.Close()
		}
	}
	t.Logf("%d calls played through the interceptor on %s", played, store)
}

func TestGRPCVectorsThroughTheUnaryInterceptor(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			play(t, url, true)
		})
	}
}

func TestGRPCVectorsThroughTheStreamInterceptor(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			play(t, url, false)
		})
	}
}
