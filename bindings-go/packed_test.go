package polylimit

import (
	"encoding/binary"
	"net/http/httptest"
	"testing"
)

// A packed outcome reads back whole; a truncated or padded one is an error,
// never a panic or a half-read outcome.
func TestPackedOutcome(t *testing.T) {
	var b []byte
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	b = binary.LittleEndian.AppendUint16(b, 429)
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 1)
	str("Retry-After")
	str("2")
	b = binary.LittleEndian.AppendUint32(b, 1)
	str("retry-after")
	str("3")
	str(`{"error":"rate_limit_exceeded"}`)
	b = binary.LittleEndian.AppendUint32(b, 1)
	str("api")
	str("per-ip")
	b = append(b, 4) // denied, not shadow, has a retry-after
	for _, n := range []uint64{10, 0, 2000, 2000, 0} {
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	b = append(b, 4)                                // penalty
	b = binary.LittleEndian.AppendUint32(b, absent) // no completion token
	o, err := parseOutcome(string(b))
	if err != nil {
		t.Fatal(err)
	}
	d := o.Decisions[0]
	if o.Status != 429 || !o.HasBody || o.Body != `{"error":"rate_limit_exceeded"}` || len(o.Headers) != 1 ||
		o.Headers[0] != [2]string{"Retry-After", "2"} || len(o.Trailers) != 1 || o.Trailers[0] != [2]string{"retry-after", "3"} || d.Rule != "api" || d.Policy != "per-ip" || d.Decision.Allowed ||
		!d.Decision.HasRetryAfter || d.Decision.Limit != 10 || d.Decision.RetryAfter.Milliseconds() != 2000 ||
		d.Decision.Source != SourcePenalty {
		t.Fatalf("%+v", o)
	}
	for n := 0; n < len(b); n++ {
		if _, err := parseOutcome(string(b[:n])); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := parseOutcome(string(b) + "x"); err == nil {
		t.Fatal("padded: no error")
	}
}

// The completion token comes last: Outcome.Completion, and what the
// middleware settles after the response.
func TestPackedOutcomeCompletion(t *testing.T) {
	var b []byte
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 0) // no headers
	b = binary.LittleEndian.AppendUint32(b, 0) // no trailers
	b = binary.LittleEndian.AppendUint32(b, 0) // no decisions
	token := "pl1;n1;c1;rs0,failed,ip=1"
	b = binary.LittleEndian.AppendUint32(b, uint32(len(token)))
	b = append(b, token...)
	o, err := parseOutcome(string(b))
	if err != nil || o.Completion != token {
		t.Fatalf("%+v %v", o, err)
	}
	head, ok := writeOutcome(httptest.NewRecorder(), string(b))
	if !ok || head.completion != token {
		t.Fatalf("%+v %v", head, ok)
	}
	if _, err := parseOutcome(string(b[:len(b)-1])); err == nil {
		t.Fatal("truncated token: no error")
	}
}

// An empty string is packed as absent, as encoding/json's omitempty left it
// out: the core then uses its defaults (GET, /).
func TestPackedRequestLeavesEmptyStringsOut(t *testing.T) {
	p := getPacker()
	defer putPacker(p)
	p.request(&RequestInfo{Path: "/x", Headers: [][2]string{{"A", ""}}})
	want := []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, '/', 'x'}
	for i := 0; i < 5; i++ {
		want = append(want, 0xff, 0xff, 0xff, 0xff)
	}
	want = append(want, 1, 0, 0, 0, 1, 0, 0, 0, 'A', 0, 0, 0, 0)
	if string(p.buf) != string(want) {
		t.Fatalf("packed %v, want %v", p.buf, want)
	}
}
