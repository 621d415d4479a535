package polylimit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The blocked-key cache through Go (Options.BlockCache): accepted, a denied
// key is then answered locally until its retry time, and the hits show in
// Metrics; a bad value is a ConfigError naming the field.
func TestBlockCache(t *testing.T) {
	const now = int64(1_700_000_000_000)
	l := newLimiter(t, Options{Policy: &Policy{Rate: "10/s", Burst: 1}, Store: startRedis(t).url(), Prefix: "go-block-cache", BlockCache: 50})
	ctx := context.Background()
	check := func(at int64) Decision {
		t.Helper()
		d, err := l.Check(ctx, "k", WithNowMs(at))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	hits := func() int {
		t.Helper()
		text, err := l.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		const line = `polylimit_block_cache_hits_total{policy="default"} `
		for _, l := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(l, line); ok {
				n, err := strconv.Atoi(rest)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no hits line in:\n%s", text)
		return 0
	}
	if !check(now).Allowed {
		t.Fatal("the first check is admitted")
	}
	if d := check(now); d.Allowed || !d.HasRetryAfter || d.RetryAfter != 100*time.Millisecond || hits() != 0 {
		t.Fatalf("denied by the store: %+v, hits %d", d, hits())
	}
	if d := check(now + 30); d.Allowed || !d.HasRetryAfter || d.RetryAfter != 70*time.Millisecond || d.Source != SourceStore || hits() != 1 {
		t.Fatalf("from the cache: %+v, hits %d", d, hits())
	}
	if d := check(now + 100); !d.Allowed || hits() != 1 {
		t.Fatalf("at the retry instant the store admits: %+v, hits %d", d, hits())
	}
	_, err := New(Options{Policy: &Policy{Rate: "1/s"}, BlockCache: -1})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "BlockCache" {
		t.Fatalf("BlockCache: -1: %v", err)
	}
}
