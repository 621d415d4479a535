package polylimit

import (
	"encoding/binary"
	"math"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RequestInfo is what the core needs to know about an HTTP request.
type RequestInfo struct {
	Method string `json:"method,omitempty"` // the HTTP method (GET, POST, …)
	// Path is the path the router saw, or the request target: the core
	// reduces an absolute-form target to its path, drops the query and
	// fragment and decodes unreserved percent-escapes before matching.
	Path string `json:"path,omitempty"`
	// Route is the route template, when known; without one the "route"
	// dimension is "unmatched".
	Route string `json:"route,omitempty"`
	// Peer is the TCP peer address; "" or "@" (a Unix socket) is a peer
	// without an address, trusted only with "unix" in TrustedProxies.
	Peer    string      `json:"peer,omitempty"`
	Headers [][2]string `json:"headers,omitempty"` // name/value pairs, repeated names in order
	User    string      `json:"user,omitempty"`    // the "user" dimension; "" for anonymous
	APIKey  string      `json:"api_key,omitempty"` // the "api_key" dimension; "" for none
	Key     string      `json:"key,omitempty"`     // the "key" dimension, chosen by the caller
	Cost    uint64      `json:"cost,omitempty"`    // units the request consumes; 0: 1
	NowMs   *int64      `json:"now_ms,omitempty"`  // tests and simulations only
	// The router's path matching: case-insensitive, one trailing slash
	// ignored. Both false for net/http's ServeMux.
	CaseInsensitive     bool `json:"case_insensitive,omitempty"`      // paths match whatever their case
	IgnoreTrailingSlash bool `json:"ignore_trailing_slash,omitempty"` // "/a/" matches "/a"
}

// Outcome says how to answer a request.
type Outcome struct {
	// Status is 0 to let the request through, else 429, 503 or 403 (a gRPC
	// call: its status code 8, 14 or 7).
	Status int
	// Headers to set on the response, allowed or not, in order.
	Headers [][2]string
	// Trailers: a gRPC call's trailing metadata (retry-after on a refusal).
	Trailers [][2]string
	// Body of a refusal (JSON; a gRPC call's status message); HasBody says whether there is one.
	Body    string
	HasBody bool // whether Body is set
	// Delay: hold the request this long before serving it (shape mode).
	Delay time.Duration
	// Decisions: every policy's decision.
	Decisions []RuleDecision
	// Completion is set when the request was allowed and a rule counts only
	// some responses (Options.Count, a rule's count): pass it to
	// Limiter.Complete with the response's status. Server-side only.
	Completion string
}

// RuleDecision is one policy's decision for a request.
type RuleDecision struct {
	Rule     string   // the rule's name
	Policy   string   // the policy's name
	Shadow   bool     // the rule only records: its denial never refuses
	Decision Decision // the policy's decision
}

// The compact encodings of polylimit_limiter_try_check_request (the core's
// wire::packed, core/src/wire/packed.rs, documents the layout): little-endian
// integers, strings as a uint32 length and the bytes. No JSON either way, and
// no allocation to build a request.

// absent is the length of an absent string (C.POLYLIMIT_ABSENT).
const absent = math.MaxUint32

// packer holds the buffers of one request: the packed request, and room for
// the packed outcome (a larger one comes back in memory polylimit owns).
type packer struct {
	buf []byte
	out []byte
	// tooLong: a string of 4 GiB or more was given (no real request has one).
	tooLong bool
}

const (
	packerBuf = 2048
	packerOut = 1024
	// A packer that grew past this is not kept for reuse.
	packerKeep = 64 << 10
)

var packers = sync.Pool{New: func() any {
	return &packer{buf: make([]byte, 0, packerBuf), out: make([]byte, packerOut)}
}}

func getPacker() *packer {
	p := packers.Get().(*packer)
	p.buf, p.tooLong = p.buf[:0], false
	return p
}

func putPacker(p *packer) {
	if cap(p.buf) <= packerKeep {
		packers.Put(p)
	}
}

func (p *packer) str(s string) {
	if uint64(len(s)) >= absent {
		p.tooLong = true
		s = ""
	}
	p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(len(s)))
	p.buf = append(p.buf, s...)
}

// opt packs s, or an absent string for "" (as encoding/json's omitempty did).
func (p *packer) opt(s string) {
	if s == "" {
		p.buf = binary.LittleEndian.AppendUint32(p.buf, absent)
		return
	}
	p.str(s)
}

// fields packs the strings before the headers, in the order of wire::packed.
func (p *packer) fields(method, path, route, peer, user, apiKey, key string) {
	p.opt(method)
	p.opt(path)
	p.opt(route)
	p.opt(peer)
	p.opt(user)
	p.opt(apiKey)
	p.opt(key)
}

// headerCount packs room for the header count (set by setCount); returns where it is.
func (p *packer) headerCount() int {
	at := len(p.buf)
	p.buf = append(p.buf, 0, 0, 0, 0)
	return at
}

func (p *packer) setCount(at, n int) {
	binary.LittleEndian.PutUint32(p.buf[at:], uint32(n))
}

// request packs req's strings and headers.
func (p *packer) request(req *RequestInfo) {
	p.fields(req.Method, req.Path, req.Route, req.Peer, req.User, req.APIKey, req.Key)
	at := p.headerCount()
	for _, h := range req.Headers {
		p.str(h[0])
		p.str(h[1])
	}
	p.setCount(at, len(req.Headers))
}

// canonicalNames maps the header names the core writes to their canonical
// form (what http.Header.Set would use), computed once per name: the core
// writes a handful of names, so the map stays small (and stops growing at
// maxCanonicalNames).
var canonicalNames atomic.Pointer[map[string]string]

const maxCanonicalNames = 64

var canonicalMu sync.Mutex

func canonicalName(name string) string {
	if m := canonicalNames.Load(); m != nil {
		if c, ok := (*m)[name]; ok {
			return c
		}
	}
	c := textproto.CanonicalMIMEHeaderKey(name)
	canonicalMu.Lock()
	defer canonicalMu.Unlock()
	old := canonicalNames.Load()
	if old != nil && len(*old) >= maxCanonicalNames {
		return c
	}
	next := make(map[string]string, 8)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[strings.Clone(name)] = c
	canonicalNames.Store(&next)
	return c
}
