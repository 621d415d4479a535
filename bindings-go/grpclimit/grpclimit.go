// Package grpclimit limits a grpc-go server's calls by a polylimit Limiter's
// rules: unary and stream server interceptors that decide each call (a
// request of the core's gRPC kind: the route is the full method name, the
// client the peer or, through trusted_proxies, the x-forwarded-for
// metadata), send the rate-limit metadata as the response's header
// metadata, refuse with the core's status code (RESOURCE_EXHAUSTED,
// UNAVAILABLE, PERMISSION_DENIED), message and retry-after trailer, and
// settle a rule's count or a concurrency slot with the code the call ended
// with. A handler that learns the call's actual cost (an LLM call's tokens)
// reports it with polylimit.ReportCost(ctx, n) on its ctx (a stream's
// ss.Context()): the call is completed with it, the difference from its
// reservation (a rule's cost, or WithCostFunc's) given back or charged.
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)))
package grpclimit

import (
	"context"
	"strings"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Option configures the interceptors.
type Option func(*options)

type options struct {
	key, user, apiKey func(ctx context.Context) string
	cost              func(ctx context.Context) uint64
	now               func(ctx context.Context) time.Time
	onError           func(ctx context.Context, err error) error
}

// WithKeyFunc gives the "key" dimension of each call (a rule keyed by key
// must read it). ctx is the call's: metadata.FromIncomingContext,
// grpc.Method and peer.FromContext read it.
func WithKeyFunc(f func(ctx context.Context) string) Option { return func(o *options) { o.key = f } }

// WithUserFunc gives the authenticated user ("user" dimension); "" for anonymous.
func WithUserFunc(f func(ctx context.Context) string) Option { return func(o *options) { o.user = f } }

// WithAPIKeyFunc gives the API key ("api_key" dimension).
func WithAPIKeyFunc(f func(ctx context.Context) string) Option {
	return func(o *options) { o.apiKey = f }
}

// WithCostFunc gives the units each call consumes (0: 1).
func WithCostFunc(f func(ctx context.Context) uint64) Option { return func(o *options) { o.cost = f } }

// WithNowFunc decides each call at the time f gives instead of on the
// store's clock (the zero Time keeps the store's), and completes it at the
// time f gives once the handler has returned (CompleteOptions.NowMs): for
// tests and simulations only, as polylimit.RequestInfo.NowMs.
func WithNowFunc(f func(ctx context.Context) time.Time) Option { return func(o *options) { o.now = f } }

// WithErrorHandler gives the error a call ends with when the limiter itself
// fails (closed, bad configuration); by default INTERNAL with the error's
// text (CANCELED or DEADLINE_EXCEEDED when the call's context ended).
func WithErrorHandler(f func(ctx context.Context, err error) error) Option {
	return func(o *options) { o.onError = f }
}

func build(opts []Option) *options {
	o := &options{onError: func(ctx context.Context, err error) error {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Internal, err.Error())
	}}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// UnaryServerInterceptor limits unary calls; the rate-limit metadata is
// sent as the response's header metadata (grpc.SetHeader).
func UnaryServerInterceptor(l *polylimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	o := build(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		token, err := o.admit(ctx, l, info.FullMethod, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) },
			func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
		if err != nil {
			return nil, err
		}
		if token == "" {
			return handler(ctx, req)
		}
		// Where the handler reports the call's actual cost (polylimit.ReportCost).
		ctx = polylimit.NewCostContext(ctx)
		defer o.settle(ctx, l, token, &err)
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams, each once when it opens (one
// request however many messages); a slot or a count is settled when the
// handler returns (the stream ended, a client's cancel included).
func StreamServerInterceptor(l *polylimit.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	o := build(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx := ss.Context()
		token, err := o.admit(ctx, l, info.FullMethod, ss.SetHeader, ss.SetTrailer)
		if err != nil {
			return err
		}
		if token == "" {
			return handler(srv, ss)
		}
		// Where the handler reports the stream's actual cost (polylimit.ReportCost).
		ctx = polylimit.NewCostContext(ctx)
		defer o.settle(ctx, l, token, &err)
		return handler(srv, &costStream{ServerStream: ss, ctx: ctx})
	}
}

// costStream is a stream whose Context is where its handler reports the
// actual cost.
type costStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *costStream) Context() context.Context { return s.ctx }

// admit decides the call: its metadata goes out through setHeader, a
// refusal's trailers through setTrailer and its status as the error. Returns
// the completion token to settle after the handler ("" for none).
func (o *options) admit(ctx context.Context, l *polylimit.Limiter, method string,
	setHeader func(metadata.MD) error, setTrailer func(metadata.MD)) (string, error) {
	out, err := l.CheckRequest(ctx, o.request(ctx, method))
	if err != nil {
		return "", o.onError(ctx, err)
	}
	if len(out.Headers) > 0 {
		_ = setHeader(pairs(out.Headers))
	}
	if out.Status != 0 {
		if len(out.Trailers) > 0 {
			setTrailer(pairs(out.Trailers))
		}
		return "", status.Error(codes.Code(out.Status), out.Body)
	}
	if out.Delay > 0 {
		t := time.NewTimer(out.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if out.Completion != "" {
				o.complete(ctx, l, out.Completion, polylimit.NoCode) // gone before the handler: no status
			}
			return "", status.FromContextError(ctx.Err()).Err()
		}
	}
	return out.Completion, nil
}

// request is what the core needs to know about the call.
func (o *options) request(ctx context.Context, method string) *polylimit.RequestInfo {
	req := &polylimit.RequestInfo{Kind: polylimit.KindGRPC, Path: method}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		req.Peer = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		n := 0
		for _, values := range md {
			n += len(values)
		}
		req.Headers = make([][2]string, 0, n)
		for name, values := range md {
			if strings.HasSuffix(name, "-bin") {
				continue // binary metadata: no rule reads it
			}
			for _, v := range values {
				req.Headers = append(req.Headers, [2]string{name, v})
			}
		}
	}
	if o.key != nil {
		req.Key = o.key(ctx)
	}
	if o.user != nil {
		req.User = o.user(ctx)
	}
	if o.apiKey != nil {
		req.APIKey = o.apiKey(ctx)
	}
	if o.cost != nil {
		req.Cost = o.cost(ctx)
	}
	if o.now != nil {
		if t := o.now(ctx); !t.IsZero() {
			ms := t.UnixMilli()
			req.NowMs = &ms
		}
	}
	return req
}

func pairs(list [][2]string) metadata.MD {
	md := make(metadata.MD, len(list))
	for _, p := range list {
		md[p[0]] = append(md[p[0]], p[1])
	}
	return md
}

// settle completes the call once its handler has returned, with the code it
// ended with (status.Code: OK for nil, UNKNOWN for an error that is no
// status, as grpc-go sends it); a panic is no status at all, and goes on.
func (o *options) settle(ctx context.Context, l *polylimit.Limiter, token string, err *error) {
	if p := recover(); p != nil {
		o.complete(ctx, l, token, polylimit.NoCode)
		panic(p)
	}
	o.complete(ctx, l, token, int(status.Code(*err)))
}

// complete settles a call even when its client is gone (the core bounds it
// by its timeout), with the actual cost its handler reported, if any.
func (o *options) complete(ctx context.Context, l *polylimit.Limiter, token string, code int) {
	opts := polylimit.CompleteOptions{Cost: polylimit.ReportedCost(ctx)}
	if o.now != nil {
		if t := o.now(ctx); !t.IsZero() {
			ms := t.UnixMilli()
			opts.NowMs = &ms
		}
	}
	_ = l.CompleteCallWith(context.WithoutCancel(ctx), token, code, opts)
}
