package harness

import (
	"context"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Entry is one descriptor entry, as Envoy sends it.
type Entry struct{ Key, Value string }

// Descriptor is one Envoy rate-limit descriptor with its own hits_addend
// (nil: the request's).
func Descriptor(hits *uint64, entries ...Entry) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

// Client is a gRPC client of envoy.service.ratelimit.v3.RateLimitService.
type Client struct {
	Conn *grpc.ClientConn
	RLS  rlsv3.RateLimitServiceClient
}

// Dial connects (lazily, as grpc-go does) to addr in plaintext.
func Dial(addr string, options ...grpc.DialOption) (*Client, error) {
	options = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, options...)
	conn, err := grpc.NewClient(addr, options...)
	if err != nil {
		return nil, err
	}
	return &Client{Conn: conn, RLS: rlsv3.NewRateLimitServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.Conn.Close() }

// WithNow is ctx carrying the test clock (x-polylimit-now-ms), which the
// server reads only with POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1.
func WithNow(ctx context.Context, nowMs int64) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-polylimit-now-ms", strconv.FormatInt(nowMs, 10))
}

// ShouldRateLimit sends one request.
func (c *Client) ShouldRateLimit(ctx context.Context, domain string, hits uint32, descriptors ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	return c.RLS.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descriptors, HitsAddend: hits})
}
