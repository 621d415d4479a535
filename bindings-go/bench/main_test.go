package main

import (
	"strings"
	"testing"
)

// -handlers without the unlimited handler: no ratio, no target verdict.
func TestNoRatioWithoutItsBaseline(t *testing.T) {
	l := line{What: "net/http polylimit middleware, memory store", Value: 1000, Unit: "req/s"}.
		against("no limiter", 0).atLeast(0.9)
	if got := l.text(); !strings.HasSuffix(got, " 1000 req/s  (no ratio: no limiter not run)") {
		t.Fatalf("text() = %q", got)
	}
	if l.Ratio != nil || l.BaselineValue != nil {
		t.Fatalf("ratio %v, baseline value %v: want none", l.Ratio, l.BaselineValue)
	}
}

func TestRatioAgainstItsBaseline(t *testing.T) {
	l := line{What: "x", Value: 900, Unit: "req/s"}.against("no limiter", 1000).atLeast(0.9)
	if got := l.text(); !strings.HasSuffix(got, "  0.90x no limiter (target >= 0.9: met)") {
		t.Fatalf("text() = %q", got)
	}
}
