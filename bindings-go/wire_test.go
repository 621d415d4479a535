package polylimit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// wireVectors is tests/conformance/wire/packed.json.
type wireVectors struct {
	About   string `json:"about"`
	Batch   string `json:"batch"`
	Records []struct {
		Name  string          `json:"name"`
		Ctx   uint64          `json:"ctx"`
		Kind  string          `json:"kind"`
		Value json.RawMessage `json:"value"`
		Hex   string          `json:"hex"`
	} `json:"records"`
}

type decisionJSON struct {
	Allowed      bool    `json:"allowed"`
	Limit        uint64  `json:"limit"`
	Remaining    uint64  `json:"remaining"`
	ResetAfterMs uint64  `json:"reset_after_ms"`
	RetryAfterMs *uint64 `json:"retry_after_ms"`
	DelayMs      uint64  `json:"delay_ms"`
	Source       Source  `json:"source"`
}

func toDecisionJSON(d Decision) decisionJSON {
	j := decisionJSON{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfterMs: uint64(d.ResetAfter.Milliseconds()), DelayMs: uint64(d.Delay.Milliseconds()), Source: d.Source,
	}
	if d.HasRetryAfter {
		ms := uint64(d.RetryAfter.Milliseconds())
		j.RetryAfterMs = &ms
	}
	return j
}

func nullable(s string, ok bool) *string {
	if !ok {
		return nil
	}
	return &s
}

// loadWireVectors reads tests/conformance/wire/packed.json (or the copy
// under $POLYLIMIT_VECTORS).
func loadWireVectors(t *testing.T) wireVectors {
	t.Helper()
	base := os.Getenv("POLYLIMIT_VECTORS")
	if base == "" {
		base = filepath.Join("..", "tests", "conformance")
	}
	text, err := os.ReadFile(filepath.Join(base, "wire", "packed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v wireVectors
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || len(v.Records) == 0 {
		t.Fatalf("packed.json: %v (%d records)", err, len(v.Records))
	}
	return v
}

// recordValue is what a record read back says, in the vectors' JSON form.
func recordValue(t *testing.T, rec record) (kind string, value any) {
	switch rec.kind {
	case recordError:
		var name string
		for n, s := range sentinelOf {
			if errors.Is(rec.err, s) {
				name = n
			}
		}
		var field, value, key *string
		var message string
		var ce *ConfigError
		var e *Error
		switch {
		case errors.As(rec.err, &ce):
			message, field, value = ce.Message, nullable(ce.Field, true), nullable(ce.Value, true)
		case errors.As(rec.err, &e):
			message, key = e.Message, nullable(e.Key, errors.Is(e, ErrStore))
		}
		return "error", map[string]any{"kind": name, "message": message, "field": field, "value": value, "key": key}
	case recordUnit:
		return "unit", nil
	case recordBool:
		return "bool", rec.flag
	case recordCount:
		return "count", rec.count
	case recordDecision:
		return "decision", toDecisionJSON(rec.decision)
	case recordDecisions:
		list := []decisionJSON{}
		for _, d := range rec.decisions {
			list = append(list, toDecisionJSON(d))
		}
		return "decisions", list
	case recordAcquired:
		leases := []map[string]any{}
		for _, l := range rec.leases {
			leases = append(leases, map[string]any{"policy": l.Policy, "key": l.Key, "id": l.ID})
		}
		return "acquired", map[string]any{"decision": toDecisionJSON(rec.decision), "leases": leases}
	case recordOutcome:
		o, err := parseOutcome(rec.outcome)
		if err != nil {
			t.Fatal(err)
		}
		decisions := []map[string]any{}
		for _, d := range o.Decisions {
			m := map[string]any{"rule": d.Rule, "policy": d.Policy, "shadow": d.Shadow}
			var j map[string]any
			b, _ := json.Marshal(toDecisionJSON(d.Decision))
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&j); err != nil {
				t.Fatal(err)
			}
			for k, v := range j {
				m[k] = v
			}
			decisions = append(decisions, m)
		}
		var status *int
		if o.Status != 0 {
			status = &o.Status
		}
		headers, trailers := o.Headers, o.Trailers
		if headers == nil {
			headers = [][2]string{}
		}
		if trailers == nil {
			trailers = [][2]string{}
		}
		return "outcome", map[string]any{
			"status": status, "headers": headers, "trailers": trailers, "body": nullable(o.Body, o.HasBody),
			"delay_ms": o.Delay.Milliseconds(), "decisions": decisions,
			// The reader says "" for none: the vectors' empty token reads as none.
			"completion": nullable(o.Completion, o.Completion != ""),
		}
	case recordJSON:
		return "json", json.RawMessage(rec.json)
	}
	t.Fatalf("kind %d", rec.kind)
	return "", nil
}

// normalized is v through JSON, numbers kept exact, for comparing.
func normalized(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The core's packed records (errors, decisions, outcomes, leases, counts,
// JSON) read back in Go as the shared vectors say, one by one and as one
// batch; a truncated record reads as bad, never a panic.
func TestWireVectors(t *testing.T) {
	v := loadWireVectors(t)
	for _, c := range v.Records {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		r := reader{s: string(b)}
		rec := r.record()
		if r.bad || r.s != "" {
			t.Errorf("%s: bad record (%d bytes left)", c.Name, len(r.s))
			continue
		}
		kind, got := recordValue(t, rec)
		// An outcome's empty completion token reads as none in Go.
		want := normalized(t, c.Value)
		if m, ok := want.(map[string]any); ok && kind == "outcome" && m["completion"] == "" {
			m["completion"] = nil
		}
		if rec.ctx != c.Ctx || kind != c.Kind || !reflect.DeepEqual(normalized(t, got), want) {
			t.Errorf("%s: read ctx %d %s %v, want ctx %d %s %v", c.Name, rec.ctx, kind, normalized(t, got), c.Ctx, c.Kind, want)
		}
		for n := range len(b) {
			short := reader{s: string(b[:n])}
			if short.record(); !short.bad {
				t.Errorf("%s: truncated to %d bytes reads", c.Name, n)
			}
		}
	}
	b, err := hex.DecodeString(v.Batch)
	if err != nil {
		t.Fatal(err)
	}
	r := reader{s: string(b)}
	for i, c := range v.Records {
		if rec := r.record(); r.bad || rec.ctx != c.Ctx {
			t.Fatalf("batch record %d: ctx %d, want %d", i, rec.ctx, c.Ctx)
		}
	}
	if r.s != "" {
		t.Errorf("batch: %d bytes after the last record", len(r.s))
	}
}
