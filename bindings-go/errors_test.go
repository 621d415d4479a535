package polylimit

import (
	"errors"
	"testing"
)

// Every error kind of the core (read from the C library) has its own
// sentinel, and only the internal kind maps to ErrInternal: a new kind in the
// core fails here instead of surfacing as an internal error.
func TestEveryErrorKindHasItsSentinel(t *testing.T) {
	if len(errorKinds) == 0 {
		t.Fatal("the C library lists no error kind")
	}
	seen := map[error]string{}
	for _, k := range errorKinds {
		want := sentinelOf[k.name]
		if want == nil {
			t.Errorf("core error kind %q (status %d) has no sentinel in sentinelOf", k.name, k.status)
			continue
		}
		got := kindOf(k.status)
		if got != want {
			t.Errorf("kind %q: kindOf(%d) = %v, want %v", k.name, k.status, got, want)
		}
		if (got == ErrInternal) != (k.name == "internal") {
			t.Errorf("kind %q maps to %v", k.name, got)
		}
		if other, taken := seen[got]; taken {
			t.Errorf("kinds %q and %q share %v", other, k.name, got)
		}
		seen[got] = k.name
		err := &Error{Kind: got, Message: "m"}
		if !errors.Is(err, want) {
			t.Errorf("kind %q: errors.Is fails", k.name)
		}
	}
	if len(sentinelOf) != len(errorKinds) {
		t.Errorf("sentinelOf has %d names, the core %d kinds: %v", len(sentinelOf), len(errorKinds), errorKinds)
	}
}

// Every source of the core (read from the C library, in polylimit_source_t
// order) is one of this package's Source constants, each once.
func TestSourcesAreTheCores(t *testing.T) {
	constants := map[Source]bool{
		SourceStore: true, SourceLocal: true, SourceFailOpen: true, SourceFailClosed: true,
		SourcePenalty: true, SourceAllowlist: true, SourceDenylist: true, SourceAdaptive: true,
	}
	if len(sources) != len(constants) {
		t.Fatalf("the core has %d sources %v, this package %d constants", len(sources), sources, len(constants))
	}
	for i, s := range sources {
		if !constants[s] {
			t.Errorf("source %d: %q has no Source constant", i, s)
		}
		delete(constants, s)
		if got := sourceOf(i); got != s {
			t.Errorf("sourceOf(%d) = %q, want %q", i, got, s)
		}
	}
	if got := sourceOf(len(sources)); got != "unknown" {
		t.Errorf("sourceOf past the end = %q", got)
	}
}
