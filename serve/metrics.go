package serve

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors, named after vLLM's
// (vllm:num_requests_running becomes lumsearch_requests_running, and so
// on) so that existing dashboards translate.
type metrics struct {
	waiting, running       prometheus.Gauge
	blocksUsed, blocksFree prometheus.Gauge
	preemptions            prometheus.Counter
	promptTokens           prometheus.Counter
	generationTokens       prometheus.Counter
	finished               *prometheus.CounterVec
	ttft, tpot, e2e        prometheus.Histogram
	stepSeqs, stepTokens   prometheus.Histogram
	stepHost               prometheus.Histogram
}

// latencyBuckets span a millisecond to two minutes, as vLLM's do.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 120}

func newMetrics(reg prometheus.Registerer, blocks int) (*metrics, error) {
	m := &metrics{
		waiting:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "lumsearch_requests_waiting", Help: "Requests waiting to be scheduled."}),
		running:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "lumsearch_requests_running", Help: "Requests holding KV blocks."}),
		blocksUsed:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "lumsearch_kv_blocks_used", Help: "KV cache blocks held by requests."}),
		blocksFree:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "lumsearch_kv_blocks_free", Help: "KV cache blocks free."}),
		preemptions:      prometheus.NewCounter(prometheus.CounterOpts{Name: "lumsearch_preemptions_total", Help: "Requests preempted (their blocks taken back, to be recomputed)."}),
		promptTokens:     prometheus.NewCounter(prometheus.CounterOpts{Name: "lumsearch_prompt_tokens_total", Help: "Prompt tokens admitted."}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "lumsearch_generation_tokens_total", Help: "Tokens generated."}),
		finished:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lumsearch_requests_finished_total", Help: "Requests finished, by reason."}, []string{"finished_reason"}),
		ttft:             prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_time_to_first_token_seconds", Help: "Time from arrival to the first generated token.", Buckets: latencyBuckets}),
		tpot:             prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_time_per_output_token_seconds", Help: "Mean time between a request's generated tokens after the first.", Buckets: latencyBuckets}),
		e2e:              prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_e2e_request_latency_seconds", Help: "Time from arrival to the last token.", Buckets: latencyBuckets}),
		stepSeqs:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_step_sequences", Help: "Sequences in a step.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		stepTokens:       prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_step_tokens", Help: "Tokens in a step.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		stepHost:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lumsearch_step_host_seconds", Help: "Host time of a step (scheduling, metadata, detokenisation), the device's excluded.", Buckets: prometheus.ExponentialBuckets(1e-5, 2, 16)}),
	}
	for _, c := range []prometheus.Collector{m.waiting, m.running, m.blocksUsed, m.blocksFree, m.preemptions, m.promptTokens, m.generationTokens, m.finished, m.ttft, m.tpot, m.e2e, m.stepSeqs, m.stepTokens, m.stepHost} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.blocksFree.Set(float64(blocks))
	return m, nil
}
