package polylimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOverridesSetReadAndRemove(t *testing.T) {
	const now = int64(1_700_000_000_000)
	window := now - now%3_600_000
	for store, url := range stores(t) {
		t.Run(store, func(t *testing.T) {
			l := newLimiter(t, Options{Policy: &Policy{Algorithm: "fixed_window", Rate: "3/h", Name: "api"}, Store: url, Prefix: "go-overrides", Overrides: true})
			ctx := context.Background()
			info, err := l.SetOverride(ctx, "vip", Override{Policy: "api", Rate: "10/h", TTL: time.Minute, NowMs: window})
			if err != nil {
				t.Fatal(err)
			}
			want := OverrideInfo{Policy: "api", Key: "vip", Rate: "10/1h", Burst: 10, Limit: 10, ExpiresAtMs: window + 60_000}
			if *info != want {
				t.Fatalf("SetOverride = %+v, want %+v", *info, want)
			}
			admitted := func(n int, at int64) int {
				allowed := 0
				for i := 0; i < n; i++ {
					d, err := l.Check(ctx, "vip", WithNowMs(at))
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
				return allowed
			}
			if got := admitted(12, window+59_999); got != 10 {
				t.Fatalf("under the override: %d admitted, want 10", got)
			}
			if got := admitted(5, window+60_000); got != 3 {
				t.Fatalf("after its TTL: %d admitted, want the policy's 3", got)
			}
			// Without a TTL, read on the store's clock; then removed.
			if _, err := l.SetOverride(ctx, "batch", Override{Rate: "1/h"}); err != nil {
				t.Fatal(err)
			}
			got, err := l.GetOverride(ctx, "batch", "api")
			if err != nil || got == nil || got.Limit != 1 || got.ExpiresAtMs != 0 {
				t.Fatalf("GetOverride = %+v, %v", got, err)
			}
			removed, err := l.RemoveOverride(ctx, "batch", "")
			if err != nil || !removed {
				t.Fatalf("RemoveOverride = %v, %v", removed, err)
			}
			if got, err := l.GetOverride(ctx, "batch", ""); err != nil || got != nil {
				t.Fatalf("after removal: %+v, %v", got, err)
			}
		})
	}
}

func TestBadOverridesNameTheField(t *testing.T) {
	l := newLimiter(t, Options{Policy: &Policy{Algorithm: "fixed_window", Rate: "3/h"}, Overrides: true})
	for field, o := range map[string]Override{
		"rate":   {Rate: "ten/h"},
		"burst":  {Rate: "1/h", Burst: 5},
		"policy": {Rate: "1/h", Policy: "nope"},
		"ttl":    {Rate: "1/h", TTL: -time.Second},
	} {
		_, err := l.SetOverride(context.Background(), "k", o)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}
