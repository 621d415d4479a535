package otellimit_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/polylimit/polylimit/bindings-go"
	"github.com/polylimit/polylimit/bindings-go/internal/adaptertest"
	"github.com/polylimit/polylimit/bindings-go/otellimit"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

const now = int64(1_700_000_000_000)

const rules = `
store: %s
prefix: %s
block_cache: true
anomaly_log: false
policies:
  api: { rate: 2/min }
  watch: { rate: 1000/s, adaptive: { window: 1s, horizon: 4s, factor: 3, floor: 4/s } }
rules:
  - { match: { path: /api/* }, key: [ip], policy: api }
`

var (
	line  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	label = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// sample is a name and its sorted labels, as one string.
func sample(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func prometheus(t *testing.T, text string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a sample: %q", l)
		}
		labels := map[string]string{}
		for _, kv := range label.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[sample(m[1], labels)] = v
	}
	return out
}

func labelsOf(set attribute.Set) map[string]string {
	out := map[string]string{}
	for _, kv := range set.ToSlice() {
		out[string(kv.Key)] = kv.Value.AsString()
	}
	return out
}

func otelSamples(t *testing.T, rm metricdata.ResourceMetrics) map[string]float64 {
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: not a cumulative monotonic sum", m.Name)
				}
				for _, p := range data.DataPoints {
					out[sample(m.Name, labelsOf(p.Attributes))] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[sample(m.Name, labelsOf(p.Attributes))] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					labels := labelsOf(p.Attributes)
					total := uint64(0)
					for i, bound := range p.Bounds {
						total += p.BucketCounts[i]
						with := map[string]string{"le": strconv.FormatFloat(bound, 'f', -1, 64)}
						for k, v := range labels {
							with[k] = v
						}
						out[sample(m.Name+"_bucket", with)] = float64(total)
					}
					inf := map[string]string{"le": "+Inf"}
					for k, v := range labels {
						inf[k] = v
					}
					out[sample(m.Name+"_bucket", inf)] = float64(p.Count)
					out[sample(m.Name+"_sum", labels)] = p.Sum
					out[sample(m.Name+"_count", labels)] = float64(p.Count)
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func exercised(t *testing.T, store, prefix string) *polylimit.Limiter {
	l, err := polylimit.FromRules(fmt.Sprintf(rules, store, prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	at := now
	for i := 0; i < 3; i++ {
		if _, err := l.CheckRequest(ctx, &polylimit.RequestInfo{Method: "GET", Path: "/api/x", Route: "/api/{id}", Peer: "203.0.113.7", NowMs: &at}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		if _, err := l.Check(ctx, "user:2", polylimit.WithNowMs(now)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// The metrics a ManualReader collects through the producer are the
// limiter's Prometheus text: same names, labels and values.
func TestTheOtelMetricsAreThePrometheusText(t *testing.T) {
	for store, url := range adaptertest.Stores(t) {
		t.Run(store, func(t *testing.T) {
			l := exercised(t, url, "otel-go-"+store)
			reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(otellimit.NewProducer(l)))
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer provider.Shutdown(context.Background())
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			text, err := l.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			exported, expected := otelSamples(t, rm), prometheus(t, text)
			sum := "polylimit_store_latency_seconds_sum{}"
			if math.Abs(exported[sum]-expected[sum]) > 1e-9 {
				t.Errorf("latency sum %v, text %v", exported[sum], expected[sum])
			}
			delete(exported, sum)
			delete(expected, sum)
			for k, v := range expected {
				if got, ok := exported[k]; !ok || got != v {
					t.Errorf("%s: text %v, otel %v (present %v)", k, v, got, ok)
				}
			}
			for k := range exported {
				if _, ok := expected[k]; !ok {
					t.Errorf("%s: exported, not in the text", k)
				}
			}
			_, breaker := expected["polylimit_breaker_state{}"]
			if breaker != (store == "redis") {
				t.Errorf("breaker state present: %v", breaker)
			}
			denied := sample("polylimit_requests_total", map[string]string{"policy": "api", "route": "/api/*", "decision": "denied", "source": "store"})
			if exported[denied] != 1 {
				t.Errorf("%s = %v", denied, exported[denied])
			}
		})
	}
}

// A closed limiter's producer fails the collection with ErrClosed.
func TestAClosedLimiterIsAnError(t *testing.T) {
	l := exercised(t, "memory", "closed")
	l.Close()
	_, err := otellimit.NewProducer(l).Produce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("err = %v", err)
	}
}
