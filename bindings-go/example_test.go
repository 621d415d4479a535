package polylimit_test

import (
	"context"
	"fmt"
	"time"

	polylimit "github.com/polylimit/polylimit/bindings-go"
)

func Example() {
	l, err := polylimit.New(polylimit.Options{
		Policy: &polylimit.Policy{Algorithm: "gcra", Rate: "10/s", Burst: 2},
		Store:  "memory", // or "redis://127.0.0.1:6379"
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for i := 0; i < 3; i++ {
		d, _ := l.Check(context.Background(), "user:42", polylimit.WithNowMs(1_000_000))
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 100ms
}

func ExampleEffectiveConfig() {
	config, err := polylimit.EffectiveConfig(polylimit.Options{
		Policy:  &polylimit.Policy{Rate: "10/s"},
		Timeout: 250 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	policy := config["policies"].(map[string]any)["default"].(map[string]any)
	fmt.Println(config["store"], config["timeout"], policy["rate"], policy["burst"])
	// Output: memory 250ms 10/1000ms 10
}
