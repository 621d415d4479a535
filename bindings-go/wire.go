package polylimit

import "time"

// The one reader of what the core packs (wire::packed; the layout is
// documented at the top of core/src/wire/packed.rs and pinned by
// tests/conformance/wire/packed.json): little-endian integers, strings as a
// uint32 length and the bytes. An outcome, and the records of finished calls.

// reader reads packed bytes; a short read sets bad (never a panic).
type reader struct {
	s   string
	bad bool
}

func (r *reader) take(n int) string {
	if n > len(r.s) || n < 0 {
		r.bad, r.s = true, ""
		return ""
	}
	v := r.s[:n]
	r.s = r.s[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != "" {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	v := r.take(2)
	if len(v) < 2 {
		return 0
	}
	return uint16(v[0]) | uint16(v[1])<<8
}

func (r *reader) u32() uint32 {
	v := r.take(4)
	if len(v) < 4 {
		return 0
	}
	return uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24
}

func (r *reader) u64() uint64 {
	lo := r.u32()
	return uint64(lo) | uint64(r.u32())<<32
}

func (r *reader) str() string { return r.take(int(r.u32())) }

// optStr reads a string, or "" for an absent one (the length absent alone).
func (r *reader) optStr() string {
	s, _ := r.maybeStr()
	return s
}

// maybeStr reads a string and whether it is there (not the length absent alone).
func (r *reader) maybeStr() (string, bool) {
	n := r.u32()
	if n == absent {
		return "", false
	}
	return r.take(int(n)), true
}

// decisionLen is the bytes of a packed decision: bits, five uint64s, source.
const decisionLen = 1 + 5*8 + 1

// decision reads a packed decision and its shadow bit (only an outcome's has one).
func (r *reader) decision() (d Decision, shadow bool) {
	bits := r.u8()
	if bits&^7 != 0 {
		r.bad = true
	}
	d = Decision{
		Allowed: bits&1 != 0, HasRetryAfter: bits&4 != 0,
		Limit: r.u64(), Remaining: r.u64(), ResetAfter: millis(r.u64()),
		RetryAfter: millis(r.u64()), Delay: millis(r.u64()),
	}
	d.Source = sourceOf(int(r.u8()))
	return d, bits&2 != 0
}

// skipDecisions reads past a packed outcome's decisions.
func (r *reader) skipDecisions() {
	n := r.count(8 + decisionLen)
	for i := 0; i < n && !r.bad; i++ {
		r.str()
		r.str()
		r.take(decisionLen)
	}
}

// count reads a count of items of at least min bytes each, bounded by what is left.
func (r *reader) count(min int) int {
	n := int(r.u32())
	if n > len(r.s)/min {
		r.bad = true
		return 0
	}
	return n
}

// outcomeHead is the part of an outcome before its headers.
type outcomeHead struct {
	status  int
	hasBody bool
	delay   time.Duration
	// completion: the token to settle after the response (writeOutcome only).
	completion string
}

func (r *reader) head() outcomeHead {
	status := r.u16()
	hasBody := r.u8() != 0
	return outcomeHead{status: int(status), hasBody: hasBody, delay: millis(r.u64())}
}

func badOutcome() error { return &Error{Kind: ErrInternal, Message: "outcome: truncated"} }

// pairs reads a count of (name, value) pairs and the pairs (nil for none).
func (r *reader) pairs() [][2]string {
	n := r.count(8)
	if n == 0 {
		return nil
	}
	pairs := make([][2]string, n)
	for i := range pairs {
		pairs[i] = [2]string{r.str(), r.str()}
	}
	return pairs
}

// skipPairs reads past a count of (name, value) pairs and the pairs.
func (r *reader) skipPairs() {
	for n := r.count(8); n > 0 && !r.bad; n-- {
		r.str()
		r.str()
	}
}

// skipOutcome reads past a packed outcome and returns its completion token
// (a substring of the reader's).
func (r *reader) skipOutcome() string {
	head := r.head()
	r.skipPairs() // headers
	r.skipPairs() // trailers
	if head.hasBody {
		r.str()
	}
	r.skipDecisions()
	return r.optStr()
}

// outcome reads a packed outcome; its strings share the reader's memory.
func (r *reader) outcome() *Outcome {
	head := r.head()
	o := &Outcome{Status: head.status, HasBody: head.hasBody, Delay: head.delay}
	o.Headers = r.pairs()
	o.Trailers = r.pairs()
	if head.hasBody {
		o.Body = r.str()
	}
	if n := r.count(8 + decisionLen); n > 0 {
		o.Decisions = make([]RuleDecision, n)
		for i := range o.Decisions {
			d := &o.Decisions[i]
			d.Rule, d.Policy = r.str(), r.str()
			d.Decision, d.Shadow = r.decision()
		}
	}
	o.Completion = r.optStr()
	return o
}

// parseOutcome reads a whole packed outcome; its strings share packed's memory.
func parseOutcome(packed string) (*Outcome, error) {
	r := reader{s: packed}
	o := r.outcome()
	if r.bad || r.s != "" {
		return nil, badOutcome()
	}
	return o, nil
}

// The kinds of a finished call's record (wire::packed::Kind).
const (
	recordError = iota
	recordUnit
	recordBool
	recordCount
	recordDecision
	recordDecisions
	recordAcquired
	recordOutcome
	recordJSON
)

// leaseRef is one lease an acquire took, as the core names it.
type leaseRef struct {
	Policy uint32
	Key    string
	ID     string
}

// record is one finished call: its ctx, its kind and the value of that kind
// (err for an error). Its strings share the reader's memory.
type record struct {
	ctx       uint64
	kind      uint8
	err       error
	flag      bool
	count     uint64
	decision  Decision
	decisions []Decision
	leases    []leaseRef
	outcome   string // the packed outcome, read by parseOutcome or writeOutcome
	json      string
}

// record reads the next record of a batch.
func (r *reader) record() (rec record) {
	rec.ctx = r.u64()
	rec.kind = r.u8()
	switch rec.kind {
	case recordError:
		kind := int(r.u8())
		message := r.str()
		field, hasField := r.maybeStr()
		value, _ := r.maybeStr()
		key, _ := r.maybeStr()
		rec.err = errorOf(kind, message, field, value, key, hasField)
	case recordUnit:
	case recordBool:
		b := r.u8()
		r.bad = r.bad || b > 1
		rec.flag = b == 1
	case recordCount:
		rec.count = r.u64()
	case recordDecision:
		rec.decision, _ = r.decision()
	case recordDecisions:
		rec.decisions = make([]Decision, r.count(decisionLen))
		for i := range rec.decisions {
			rec.decisions[i], _ = r.decision()
		}
	case recordAcquired:
		rec.decision, _ = r.decision()
		if n := r.count(12); n > 0 {
			rec.leases = make([]leaseRef, n)
			for i := range rec.leases {
				rec.leases[i] = leaseRef{Policy: r.u32(), Key: r.str(), ID: r.str()}
			}
		}
	case recordOutcome:
		start := r.s
		r.skipOutcome()
		rec.outcome = start[:len(start)-len(r.s)]
	case recordJSON:
		rec.json = r.str()
	default:
		r.bad = true
	}
	return rec
}

// errorOf is the Go error of a packed error: kind is its place in the
// core's ErrorKind::ALL (errorKinds' order).
func errorOf(kind int, message, field, value, key string, hasField bool) error {
	sentinel := ErrInternal
	if kind >= 0 && kind < len(errorKinds) {
		if s := sentinelOf[errorKinds[kind].name]; s != nil {
			sentinel = s
		}
	}
	if sentinel == ErrConfig && hasField {
		return &ConfigError{Field: field, Value: value, Message: message}
	}
	return &Error{Kind: sentinel, Message: message, Key: key}
}
