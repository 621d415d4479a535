package polylimit

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A policy's Sync through the Go API (issue 19): the core admits from a local
// share on a real Redis.
func TestSyncedPolicyAdmitsFromItsShare(t *testing.T) {
	redis := startRedis(t)
	const now = int64(1_700_000_000_000)
	l, err := New(Options{
		Policy:  &Policy{Algorithm: "fixed_window", Rate: "100/10s", Sync: &Sync{Interval: time.Second, Share: 10}},
		Store:   redis.url(),
		Prefix:  "go-sync",
		Timeout: 10 * time.Second, // never the fallback
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var remaining []uint64
	for i := 0; i < 3; i++ {
		d, err := l.Check(ctx, "k", WithNowMs(now))
		if err != nil {
			t.Fatal(err)
		}
		remaining = append(remaining, d.Remaining)
	}
	// The store charged a share of 10: 90 left there, 9 of it here.
	if remaining[0] != 99 || remaining[1] != 98 || remaining[2] != 97 {
		t.Fatalf("remaining %v, want [99 98 97]", remaining)
	}
	// The interval ended: the 7 left are dropped, another share is taken.
	d, err := l.Check(ctx, "k", WithNowMs(now+1000))
	if err != nil || d.Remaining != 89 {
		t.Fatalf("after the interval: %+v, %v; want remaining 89", d, err)
	}
}

func TestSyncShareAboveTheLimitNamesTheField(t *testing.T) {
	_, err := New(Options{Policy: &Policy{Rate: "5/s", Sync: &Sync{Share: 6}}})
	if err == nil || !strings.Contains(err.Error(), "Policy.Sync.Share") {
		t.Fatalf("got %v, want an error naming Policy.Sync.Share", err)
	}
}
