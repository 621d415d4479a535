package polylimit

import "time"

// Policy is one rate limit (SPEC §2). Zero fields take the core's defaults.
type Policy struct {
	Name         string        // label in headers, metrics and store keys ("default")
	Algorithm    string        // token_bucket (default), leaky_bucket, gcra, fixed_window, sliding_window_log, sliding_window_counter, concurrency
	Rate         string        // "10/s", "100/min", "5/10s", "1000 per hour" (not for concurrency)
	Burst        uint64        // bucket capacity (token, leaky, gcra)
	Refill       string        // token bucket: continuous (default) or interval
	Mode         string        // leaky bucket: police (default) or shape
	MaxDelay     time.Duration // shape mode: longest delay granted
	OnStoreError string        // local (default), fail_open, fail_closed
	Penalty      *Penalty      // progressive blocking
	Adaptive     *Adaptive     // adaptive limits per key (anomaly detection)
	Limit        uint64        // concurrency: the most requests in flight per key
	Lease        time.Duration // concurrency: how long an unreleased slot is held (60s)
	Sync         *Sync         // admit from a local share, reconciled with the store every interval (docs/features/sync.md)
}

// Sync admits from a per-process share of the limit, taken from the store at
// most once per Interval per key (or when the share runs out): token_bucket,
// gcra, fixed_window and sliding_window_counter only. Zero fields take the
// defaults: Interval 100ms, Share a tenth of the limit (at least 1).
type Sync struct {
	Interval time.Duration // longest time between two store calls of a key
	Share    uint64        // units one store call takes
}

// Penalty blocks a key after repeated denials (SPEC §6).
type Penalty struct {
	Threshold   uint64          // denials within Within that block the key
	Within      time.Duration   // the time the Threshold denials must fall within
	Cooldowns   []time.Duration // block lengths, one step per block; the last repeats
	ForgetAfter time.Duration   // the level drops one step per ForgetAfter without a denial
}

// Adaptive shrinks the budget of a key whose rate jumps far above its own
// baseline, and alerts (Options.OnAnomaly, metrics, a log line).
type Adaptive struct {
	Window    time.Duration // the short window the rate is measured over (2m)
	Horizon   time.Duration // the baseline's horizon, a multiple of Window (10m)
	Factor    float64       // anomalous above Factor x baseline (20)
	Floor     string        // rate below which a key is never anomalous ("1/s")
	MinRate   string        // least rate a mitigated key keeps ("1/s")
	AlertKeys string        // keys in alerts: "dimensions" (default: ip and key values hashed), "hash" or "raw"
}

// Options build a limiter with New. Zero fields are unset and take the
// core's defaults (or a rules document's values). New hands the struct to
// the core as encoding/json writes it; durations must be whole milliseconds.
type Options struct {
	Policy *Policy // the policy
	// OnAnomaly receives the alerts of adaptive policies (Policy.Adaptive), each
	// on its own goroutine; a panic in it is counted, never reaches a request.
	OnAnomaly func(AnomalyEvent) `json:"-"`
	// AnomalyLog "off": adaptive alerts write no JSON line to stderr ("" or
	// "stderr": each alert writes one, the default).
	AnomalyLog string
	Policies   []Policy // several policies, decided atomically (give each a Name)
	// Key dimensions of the one rule Policy makes: "ip" (default), "route",
	// "method", "user", "api_key", "header:<name>", "key", "global".
	KeyBy []string
	// Which responses the one rule Policy makes charges, settled after the
	// response by Middleware: "failed" (status >= 400, or no response),
	// "successful" (< 400), or classes and codes ("4xx", "503"). Default all.
	Count     []string
	Rules     string // a rules document (YAML or JSON text); the other fields override its values
	RulesFile string // the path of a rules file (YAML or JSON)
	// Watch, with RulesFile: poll the file this often and reload it when it
	// changes (0: off); a bad file keeps the old rules (Limiter.Reload).
	Watch time.Duration

	Store            string        // "memory" (default), "redis://…", "rediss://…", "redis+cluster://h1:p1,h2:p2", "redis+sentinel://s1:p1/<service>"
	Prefix           string        // first segment of every store key ("polylimit")
	MaxKeys          int           // memory store bound (1,000,000)
	Overrides        bool          // every check reads the key's per-key override (SetOverride); off by default
	BlockCache       int           // Redis: denied keys answered locally until their retry time, at most this many (0: off)
	Timeout          time.Duration // per store call (100ms)
	ConnectTimeout   time.Duration // opening a store connection (1s)
	FailureThreshold int           // breaker: consecutive failures that open it (5)
	Cooldown         time.Duration // breaker: open time before probing (30s)
	HalfOpenProbes   int           // breaker: good probes that close it (3)
	TLSCA            string        // PEM file of the CA signing the Redis servers' certificates (rediss…)
	// Multi-region quotas: region name → its store and share (equal shares
	// when none is given). Each region's store holds its share of every
	// policy; a region out of quota borrows from another, never above the
	// global limit. Region names this process's region; its store is the
	// limiter's store (leave Store empty or the same).
	Regions map[string]RegionStore
	Region  string // this process's region, one of Regions

	TrustedProxies  []string // CIDRs (and "unix") whose forwarded header is believed
	ForwardedHeader string   // "x-forwarded-for" (default) or "forwarded"
	IPv6Subnet      int      // prefix length IPv6 clients are keyed by (64)
	Headers         string   // "both" (default), "legacy", "ietf", "none", "draft-6", "draft-7", "draft-8" (express-rate-limit's), "legacy,draft-7"
	Shadow          bool     // decide and count, never block
	Allowlist       []string // CIDRs and typed keys (user:…, api_key:…, key:…) never limited
	Denylist        []string // CIDRs and typed keys always refused
}

// RegionStore is one region of Options.Regions.
type RegionStore struct {
	Store string  `json:"store"`           // "redis://…" (any Redis store URL)
	Share float64 `json:"share,omitempty"` // its share of the global limit (0 < share <= 1, shares sum to 1); 0: equal shares
}
