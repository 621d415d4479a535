package polylimit

import (
	"errors"
	"testing"
	"time"
)

func TestCircuitBreakerOpensProbesAndCloses(t *testing.T) {
	b := NewCircuitBreaker(3, 50*time.Millisecond, 2)
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
	b := NewCircuitBreaker(1, time.Minute, 1)
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
