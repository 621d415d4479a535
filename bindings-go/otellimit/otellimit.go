// Package otellimit bridges a polylimit limiter's metrics into the
// OpenTelemetry Go SDK: a Producer (go.opentelemetry.io/otel/sdk/metric),
// the SDK's hook for metrics aggregated elsewhere, hands a reader every
// family of the limiter at each collection, with the names, labels (as
// attributes) and values of its Prometheus text, cumulative:
//
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(otellimit.NewProducer(limiter)))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//
// It is a module of its own so that a user of the base package never gets
// the OpenTelemetry SDK.
package otellimit

import (
	"context"
	"fmt"
	"time"

	"github.com/polylimit/polylimit/bindings-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// ScopeName is the instrumentation scope of every metric the producer hands over.
const ScopeName = "polylimit"

// Producer reads a limiter's metrics from the core at each collection.
type Producer struct {
	limiter *polylimit.Limiter
}

var _ sdkmetric.Producer = (*Producer)(nil)

// NewProducer returns the producer of limiter's metrics, for
// sdkmetric.WithProducer on a reader.
func NewProducer(limiter *polylimit.Limiter) *Producer {
	return &Producer{limiter: limiter}
}

// Produce returns the limiter's metrics now, under the polylimit scope:
// counters as monotonic cumulative sums, gauges as gauges, the histogram as
// a cumulative explicit-bucket histogram (without min and max, which the
// core does not record). A closed limiter is an error (polylimit.ErrClosed).
func (p *Producer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snapshot, err := p.limiter.MetricsSnapshot()
	if err != nil {
		return nil, err
	}
	metrics, err := Metrics(snapshot, time.Now())
	if err != nil {
		return nil, err
	}
	scope := instrumentation.Scope{Name: ScopeName, Version: polylimit.Version}
	return []metricdata.ScopeMetrics{{Scope: scope, Metrics: metrics}}, nil
}

// Metrics converts one snapshot read at now into OpenTelemetry metrics.
func Metrics(snapshot polylimit.MetricsSnapshot, now time.Time) ([]metricdata.Metrics, error) {
	start := time.Unix(0, int64(snapshot.StartUnixNanos))
	out := make([]metricdata.Metrics, 0, len(snapshot.Families))
	for _, family := range snapshot.Families {
		m := metricdata.Metrics{Name: family.Name, Description: family.Help}
		switch family.Kind {
		case "counter", "gauge":
			points := make([]metricdata.DataPoint[int64], len(family.Points))
			for i, p := range family.Points {
				points[i] = metricdata.DataPoint[int64]{Attributes: attributes(p.Labels), Time: now, Value: p.Value}
				if family.Kind == "counter" {
					points[i].StartTime = start
				}
			}
			if family.Kind == "counter" {
				m.Data = metricdata.Sum[int64]{DataPoints: points, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
			} else {
				m.Data = metricdata.Gauge[int64]{DataPoints: points}
			}
		case "histogram":
			points := make([]metricdata.HistogramDataPoint[float64], len(family.Points))
			for i, p := range family.Points {
				points[i] = metricdata.HistogramDataPoint[float64]{
					Attributes:   attributes(p.Labels),
					StartTime:    start,
					Time:         now,
					Count:        p.Count,
					Bounds:       p.Bounds,
					BucketCounts: p.BucketCounts,
					Sum:          p.Sum,
				}
			}
			m.Data = metricdata.Histogram[float64]{DataPoints: points, Temporality: metricdata.CumulativeTemporality}
		default:
			return nil, fmt.Errorf("otellimit: metric %s: kind %q is not counter, gauge or histogram", family.Name, family.Kind)
		}
		out = append(out, m)
	}
	return out, nil
}

func attributes(labels map[string]string) attribute.Set {
	kvs := make([]attribute.KeyValue, 0, len(labels))
	for k, v := range labels {
		kvs = append(kvs, attribute.String(k, v))
	}
	return attribute.NewSet(kvs...)
}
