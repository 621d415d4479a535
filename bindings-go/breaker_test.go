package polylimit

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCircuitBreakerOpensProbesAndCloses(t *testing.T) {
	b, err := NewCircuitBreaker(3, 50*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	boom := errors.New("boom")
	var seen []error
	fallback := func(err error) error { seen = append(seen, err); return err }
	calls := 0
	fail := func() error { calls++; return boom }
	ok := func() error { calls++; return nil }

	if err := b.Call(ok, fallback); err != nil || b.State() != BreakerClosed {
		t.Fatalf("%v %s", err, b.State())
	}
	for i := 0; i < 3; i++ {
		if err := b.Call(fail, fallback); !errors.Is(err, boom) {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	if b.State() != BreakerOpen {
		t.Fatalf("after 3 failures: %s", b.State())
	}
	before := calls
	if err := b.Call(ok, fallback); !errors.Is(err, ErrBreakerOpen) || calls != before {
		t.Fatalf("open: %v, calls %d→%d", err, before, calls)
	}
	// The cooldown ending is what is tested: the breaker's clock is the wall
	// clock, so the cooldown is short (50 ms) and slept just past.
	time.Sleep(70 * time.Millisecond)
	if b.State() != BreakerHalfOpen {
		t.Fatalf("after the cooldown: %s", b.State())
	}
	for i := 0; i < 2; i++ {
		if err := b.Call(ok, fallback); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if b.State() != BreakerClosed {
		t.Fatalf("after 2 good probes: %s", b.State())
	}
	if len(seen) != 4 || !errors.Is(seen[3], ErrBreakerOpen) {
		t.Fatalf("fallback saw %v", seen)
	}
}

func TestCircuitBreakerCountsAPanicAsAFailure(t *testing.T) {
	b, err := NewCircuitBreaker(1, time.Minute, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic must keep unwinding")
			}
		}()
		b.Call(func() error { panic("downstream") }, func(err error) error { return err })
	}()
	if b.State() != BreakerOpen {
		t.Fatalf("state %s", b.State())
	}
	b.Close()
	b.Close()
	if err := b.Call(func() error { return nil }, func(err error) error { return err }); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed breaker: %v", err)
	}
}

// tests/conformance/client/breaker_options.json: the core checks
// NewCircuitBreaker's values and names the one at fault, as Go spells it;
// an argument the vector leaves out is the file's default.
func TestCircuitBreakerOptionsVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "tests", "conformance", "client", "breaker_options.json"))
	if err != nil {
		t.Fatal(err)
	}
	type options struct {
		Threshold   *uint32 `json:"threshold"`
		Cooldown    *int64  `json:"cooldown"`
		HalfOpenMax *uint32 `json:"halfOpenMax"`
	}
	var v struct {
		Defaults struct {
			Threshold   uint32 `json:"threshold"`
			CooldownMs  int64  `json:"cooldown_ms"`
			HalfOpenMax uint32 `json:"half_open_max"`
		} `json:"defaults"`
		Valid, Invalid []struct {
			Naming  string          `json:"naming"`
			Options json.RawMessage `json:"options"`
			Error   string          `json:"error"`
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	build := func(text json.RawMessage) (*CircuitBreaker, error) {
		var o options
		if err := json.Unmarshal(text, &o); err != nil {
			t.Fatal(err)
		}
		threshold, cooldown, halfOpenMax := v.Defaults.Threshold, time.Duration(v.Defaults.CooldownMs)*time.Millisecond, v.Defaults.HalfOpenMax
		if o.Threshold != nil {
			threshold = *o.Threshold
		}
		if o.Cooldown != nil {
			cooldown = time.Duration(*o.Cooldown)
		}
		if o.HalfOpenMax != nil {
			halfOpenMax = *o.HalfOpenMax
		}
		return NewCircuitBreaker(threshold, cooldown, halfOpenMax)
	}
	played := 0
	for _, c := range v.Invalid {
		if c.Naming != "go" {
			continue
		}
		played++
		b, err := build(c.Options)
		var cfg *ConfigError
		if b != nil || !errors.As(err, &cfg) || cfg.Message != c.Error || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, %v; want %q", c.Options, b, err, c.Error)
		}
	}
	for _, c := range v.Valid {
		if c.Naming != "go" {
			continue
		}
		played++
		b, err := build(c.Options)
		if err != nil {
			t.Errorf("%s: %v", c.Options, err)
			continue
		}
		b.Close()
	}
	if played < 4 {
		t.Fatalf("played %d go vectors", played)
	}
}

// A negative cooldown was once taken as given: it wrapped to a cooldown of
// some 584 million years, so the breaker, once open, never probed again.
// It is refused at construction.
func TestCircuitBreakerRefusesANegativeCooldown(t *testing.T) {
	b, err := NewCircuitBreaker(1, -time.Second, 1)
	var cfg *ConfigError
	if b != nil || !errors.As(err, &cfg) || cfg.Field != "cooldown" || cfg.Value != "-1000000000" {
		t.Fatalf("got %v, %v", b, err)
	}
}
