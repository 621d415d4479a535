package polylimit

import (
	"encoding/json"
	"fmt"
	"time"
)

// Policy is one rate limit (SPEC §2). Zero fields take the core's defaults.
type Policy struct {
	Name         string        // label in headers, metrics and store keys ("default")
	Algorithm    string        // token_bucket (default), leaky_bucket, gcra, fixed_window, sliding_window_log, sliding_window_counter
	Rate         string        // "10/s", "100/min", "5/10s", "1000 per hour"
	Burst        uint64        // bucket capacity (token, leaky, gcra)
	Refill       string        // token bucket: continuous (default) or interval
	Mode         string        // leaky bucket: police (default) or shape
	MaxDelay     time.Duration // shape mode: longest delay granted
	OnStoreError string        // local (default), fail_open, fail_closed
	Penalty      *Penalty      // progressive blocking
}

// Penalty blocks a key after repeated denials (SPEC §6).
type Penalty struct {
	Threshold   uint64
	Within      time.Duration
	Cooldowns   []time.Duration
	ForgetAfter time.Duration
}

func durationText(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// MarshalJSON writes the policy object the core reads.
func (p Policy) MarshalJSON() ([]byte, error) {
	m := map[string]any{"rate": p.Rate}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("name", p.Name)
	set("algorithm", p.Algorithm)
	set("refill", p.Refill)
	set("mode", p.Mode)
	set("on_store_error", p.OnStoreError)
	if p.Burst != 0 {
		m["burst"] = p.Burst
	}
	if p.MaxDelay != 0 {
		m["max_delay"] = durationText(p.MaxDelay)
	}
	if p.Penalty != nil {
		cooldowns := make([]string, len(p.Penalty.Cooldowns))
		for i, c := range p.Penalty.Cooldowns {
			cooldowns[i] = durationText(c)
		}
		pen := map[string]any{"threshold": p.Penalty.Threshold, "within": durationText(p.Penalty.Within), "cooldowns": cooldowns}
		if p.Penalty.ForgetAfter != 0 {
			pen["forget_after"] = durationText(p.Penalty.ForgetAfter)
		}
		m["penalty"] = pen
	}
	return json.Marshal(m)
}

// Options build a limiter with New. Zero fields take the core's defaults.
type Options struct {
	// Policy, or several Policies (one multi-window limit: all are decided
	// atomically and none is charged when one denies; give each a Name).
	Policy   *Policy
	Policies []Policy
	// Store: "memory" (default), "redis://host:port/db", "rediss://…",
	// "redis+cluster://h1:p1,h2:p2".
	Store            string
	Prefix           string        // first segment of every store key ("polylimit")
	MaxKeys          int           // memory store bound (1,000,000)
	Timeout          time.Duration // per store call (100ms)
	ConnectTimeout   time.Duration // opening a store connection: TCP, TLS, handshake (1s)
	FailureThreshold int           // breaker: consecutive failures that open it (5)
	Cooldown         time.Duration // breaker: open time before probing (30s)
	HalfOpenProbes   int           // breaker: good probes that close it (3)

	// For Middleware: the key dimensions of the limit (SPEC §6: "ip",
	// "route", "method", "user", "api_key", "header:<name>", "key", "global");
	// default ["ip"]. Use "key" with WithKeyFunc, "user" with WithUserFunc.
	KeyBy []string
	// Passed to the core's rules as trusted_proxies: CIDRs, and "unix" for
	// a proxy on a Unix socket (RemoteAddr "@" or ""); the core decides the
	// client address.
	TrustedProxies []string
	// The one header read from a trusted proxy: "x-forwarded-for" (the
	// default) or "forwarded"; the other is ignored.
	ForwardedHeader string
	// Header style: "both" (default), "legacy", "ietf", "none".
	Headers string
}

// rulesDocument turns Options into the rules file the core reads: the
// options, the policies by name, and one rule applying all of them.
func (o Options) rulesDocument() ([]byte, error) {
	policies := o.Policies
	if o.Policy != nil {
		if len(policies) > 0 {
			return nil, &ConfigError{Field: "policies", Message: "policies: cannot be given together with policy"}
		}
		policies = []Policy{*o.Policy}
	}
	if len(policies) == 0 {
		return nil, &ConfigError{Field: "policy", Message: "policy: is required"}
	}
	// The rule names the policies; the core defaults a missing name to
	// "default" and reports duplicates itself.
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.Name
		if names[i] == "" {
			names[i] = "default"
		}
	}
	keyBy := o.KeyBy
	if len(keyBy) == 0 {
		keyBy = []string{"ip"}
	}
	doc := map[string]any{
		"policies": policies,
		"rules":    []any{map[string]any{"name": "limit", "key": keyBy, "policy": names}},
	}
	setString := func(k, v string) {
		if v != "" {
			doc[k] = v
		}
	}
	setString("store", o.Store)
	setString("prefix", o.Prefix)
	setString("headers", o.Headers)
	setString("forwarded_header", o.ForwardedHeader)
	if o.MaxKeys != 0 {
		doc["max_keys"] = o.MaxKeys
	}
	if o.Timeout != 0 {
		doc["timeout"] = durationText(o.Timeout)
	}
	if o.ConnectTimeout != 0 {
		doc["connect_timeout"] = durationText(o.ConnectTimeout)
	}
	if o.Cooldown != 0 {
		doc["cooldown"] = durationText(o.Cooldown)
	}
	if o.FailureThreshold != 0 {
		doc["failure_threshold"] = o.FailureThreshold
	}
	if o.HalfOpenProbes != 0 {
		doc["half_open_probes"] = o.HalfOpenProbes
	}
	if len(o.TrustedProxies) > 0 {
		doc["trusted_proxies"] = o.TrustedProxies
	}
	return json.Marshal(doc)
}
