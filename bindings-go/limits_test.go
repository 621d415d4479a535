package polylimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Policy-wide limits through Go: SetLimit / GetLimit / RemoveLimit on the
// memory store and a real Redis, every key of a policy, a per-key override
// still wins, a TTL on NowMs, errors naming the field.
func TestLimitsSetReadAndRemove(t *testing.T) {
	const now = int64(1_700_000_000_000)
	window := now - now%3_600_000
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			l := newLimiter(t, Options{Policy: &Policy{Algorithm: "fixed_window", Rate: "3/h", Name: "api"}, Store: url, Prefix: "go-limits", Overrides: true})
			ctx := context.Background()
			admitted := func(key string, n int, at int64) int {
				allowed := 0
				for i := 0; i < n; i++ {
					d, err := l.Check(ctx, key, WithNowMs(at))
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
				return allowed
			}
			if got := admitted("a", 1, window); got != 1 {
				t.Fatalf("a: %d", got)
			}
			info, err := l.SetLimit(ctx, Override{Policy: "api", Rate: "10/h", TTL: time.Minute, NowMs: window})
			if err != nil {
				t.Fatal(err)
			}
			want := LimitInfo{Policy: "api", Rate: "10/1h", Burst: 10, Limit: 10, ExpiresAtMs: window + 60_000}
			if *info != want {
				t.Fatalf("SetLimit = %+v, want %+v", *info, want)
			}
			if got := admitted("b", 12, window+59_999); got != 10 {
				t.Fatalf("under the limit: %d admitted, want 10", got)
			}
			if got := admitted("a", 5, window+60_000); got != 2 {
				t.Fatalf("after its TTL: %d admitted, want the policy's 2 left", got)
			}
			if _, err := l.SetLimit(ctx, Override{Rate: "1/h"}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.SetOverride(ctx, "vip", Override{Rate: "5/h"}); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Check(ctx, "vip"); d.Limit != 5 {
				t.Fatalf("a per-key override wins: limit %d", d.Limit)
			}
			if d, _ := l.Check(ctx, "c"); d.Limit != 1 {
				t.Fatalf("the limit: %d", d.Limit)
			}
			got, err := l.GetLimit(ctx, "api")
			if err != nil || got == nil || got.Limit != 1 || got.ExpiresAtMs != 0 {
				t.Fatalf("GetLimit = %+v, %v", got, err)
			}
			removed, err := l.RemoveLimit(ctx, "")
			if err != nil || !removed {
				t.Fatalf("RemoveLimit = %v, %v", removed, err)
			}
			if got, err := l.GetLimit(ctx, ""); err != nil || got != nil {
				t.Fatalf("after removal: %+v, %v", got, err)
			}
			l.RemoveOverride(ctx, "vip", "")
			text, _ := l.Metrics()
			if !strings.Contains(text, `polylimit_limit_changes_total{policy="api",action="set"} 2`) {
				t.Fatalf("metrics: %s", text)
			}
		})
	}
}

func TestBadLimitsNameTheField(t *testing.T) {
	l := newLimiter(t, Options{Policy: &Policy{Algorithm: "fixed_window", Rate: "3/h"}, Overrides: true})
	for field, o := range map[string]Override{
		"rate":   {Rate: "ten/h"},
		"burst":  {Rate: "1/h", Burst: 5},
		"policy": {Rate: "1/h", Policy: "nope"},
		"ttl":    {Rate: "1/h", TTL: -time.Second},
	} {
		_, err := l.SetLimit(context.Background(), o)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	off := newLimiter(t, Options{Policy: &Policy{Rate: "3/h"}})
	_, err := off.SetLimit(context.Background(), Override{Rate: "1/h"})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "overrides" {
		t.Errorf("without Overrides: got %v", err)
	}
}
