package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	ctxmgr "github.com/ctxmgr/ctxmgr"
)

// metrics are the Prometheus series of one Server.
type metrics struct {
	requests      *prometheus.CounterVec   // format, status
	upstream      *prometheus.HistogramVec // format
	tokensBefore  *prometheus.HistogramVec // format
	tokensAfter   *prometheus.HistogramVec // format
	compactions   *prometheus.CounterVec   // trigger: auto, manual
	recoveries    prometheus.Counter
	fallbacks     prometheus.Counter
	prefixChanged prometheus.Counter
	prefixKept    prometheus.Counter
	verbatim      *prometheus.CounterVec // format
	commands      *prometheus.CounterVec // command
	reads         prometheus.Counter
	branches      prometheus.Counter
	reloads       prometheus.Counter
	unmanaged     *prometheus.CounterVec // reason: one of unmanagedReasons
	lowered       prometheus.Counter
	busy          prometheus.Counter
	notStored     prometheus.Counter
	usageRatio    *prometheus.HistogramVec
	overhead      *prometheus.HistogramVec
	cutThrough    *prometheus.CounterVec // result: committed, aborted, failed
	// providerContext: format, feature, decision (native.go)
	providerContext *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, decodes *decodeCache) (*metrics, error) {
	tokenBuckets := prometheus.ExponentialBuckets(1000, 2, 10) // 1K .. 512K
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_requests_total",
			Help: "Requests answered, by API format and HTTP status."}, []string{"format", "status"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ctxmgr_upstream_seconds",
			Help: "Upstream latency until the response headers, by API format.", Buckets: prometheus.DefBuckets}, []string{"format"}),
		tokensBefore: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ctxmgr_tokens_before",
			Help: "Input tokens of a request as the client sent it (the whole history).", Buckets: tokenBuckets}, []string{"format"}),
		tokensAfter: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ctxmgr_tokens_after",
			Help: "Input tokens of the request forwarded upstream, after context management.", Buckets: tokenBuckets}, []string{"format"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_compactions_total",
			Help: "Summaries made (history folded into the summary), by trigger."}, []string{"trigger"}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_recoveries_total",
			Help: "Upstream context overflows answered by a tighter request."}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_summarizer_fallbacks_total",
			Help: "Summaries made by the extractive summarizer because the configured one failed."}),
		prefixChanged: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_prefix_changed_total",
			Help: "Requests whose prefix changed since the previous request of the session (prompt-cache miss)."}),
		prefixKept: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_prefix_kept_total",
			Help: "Requests that extend the previous request of the session (cache-friendly)."}),
		verbatim: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_verbatim_requests_total",
			Help: "Managed requests the pipeline left unchanged, forwarded as the client's own bytes, by API format."}, []string{"format"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_commands_total",
			Help: "Conversation commands answered by the proxy."}, []string{"command"}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_reads_total",
			Help: "ctxmgr_read tool calls answered by the proxy."}),
		branches: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_branches_total",
			Help: "Branches made: a client edited or rewound the history of a stored session."}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_session_reloads_total",
			Help: "Sessions reloaded from the store because another instance appended to them first."}),
		unmanaged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_unmanaged_requests_total",
			Help: "Requests forwarded without context management, by reason (see the proxy package doc)."}, []string{"reason"}),
		lowered: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_max_tokens_lowered_total",
			Help: "Requests whose max_tokens the proxy lowered to fit the window in force."}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_session_busy_total",
			Help: "Chat requests answered 503 because other writers kept appending to their session (store conflicts)."}),
		notStored: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxmgr_not_stored_total",
			Help: "Chat requests answered 503 because their new messages, written while the upstream worked (SharedStore false), could not be stored."}),
		usageRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ctxmgr_usage_ratio",
			Help:    "Provider-reported input tokens divided by the proxy's estimate of the request, by counter kind (exact, heuristic).",
			Buckets: []float64{0.5, 0.8, 0.9, 0.95, 0.98, 1, 1.02, 1.05, 1.1, 1.2, 1.5, 2}}, []string{"counter"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ctxmgr_overhead_seconds",
			Help:    "Time the proxy spent on a request before forwarding it (context management), by format.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)}, []string{"format"}),
		cutThrough: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_cut_through_total",
			Help: "Upstream requests started while the client's body was read (predicted to be forwarded as is), by result: committed (it was), aborted (another request was sent, or the client went away) or failed (the upstream connection was lost before the body's last byte, and the body sent again)."}, []string{"result"}),
		providerContext: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxmgr_provider_context_total",
			Help: "Requests carrying the providers' own context management (compaction, context editing), by API format, feature and decision: passthrough (forwarded to an upstream that implements it), local (answered by the proxy) or learned (the upstream refused it; answered by the proxy and retried)."}, []string{"format", "feature", "decision"}),
	}
	for _, c := range []prometheus.Collector{m.providerContext, m.cutThrough, m.requests, m.upstream, m.tokensBefore, m.tokensAfter, m.compactions, m.recoveries,
		m.fallbacks, m.prefixChanged, m.prefixKept, m.verbatim, m.commands, m.reads, m.branches, m.reloads, m.unmanaged, m.lowered, m.busy, m.notStored, m.usageRatio, m.overhead} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Bodies decoded whole against those that continued a cached one (decode.go): whole near
	// the request count means the decode cache is too small for the sessions served.
	for result, n := range map[string]*atomic.Int64{"whole": &decodes.whole, "continued": &decodes.continued} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ctxmgr_decodes_total",
			Help:        "Request bodies decoded, by result: whole (a conversation's first, or not in the decode cache) or continued (only the messages after a cached body's decoded).",
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(n.Load()) })
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, f := range []Format{FormatOpenAI, FormatAnthropic, FormatResponses, FormatGemini} {
		m.verbatim.WithLabelValues(string(f))
	}
	for _, l := range []string{"committed", "aborted", "failed"} {
		m.cutThrough.WithLabelValues(l)
	}
	for _, l := range []string{"auto", "manual"} {
		m.compactions.WithLabelValues(l)
	}
	for _, l := range []string{"compact", "context", "clear"} {
		m.commands.WithLabelValues(l)
	}
	for _, ff := range nativeFeatures {
		for _, d := range []string{decisionPassthrough, decisionLocal, decisionLearned} {
			m.providerContext.WithLabelValues(ff[0], ff[1], d)
		}
	}
	for _, l := range unmanagedReasons {
		m.unmanaged.WithLabelValues(l)
	}
	return m, nil
}

// onEvent counts the pipeline events that have metrics.
func (m *metrics) onEvent(ev ctxmgr.Event) {
	switch ev.Step {
	case ctxmgr.StepSummarize:
		trigger := "auto"
		if strings.Contains(ev.Reason, "/compact") {
			trigger = "manual"
		}
		m.compactions.WithLabelValues(trigger).Inc()
	case ctxmgr.StepRecover:
		m.recoveries.Inc()
	case ctxmgr.StepFallback:
		m.fallbacks.Inc()
	}
}

// registerRuntime adds the Go runtime (go_goroutines, go_memstats_*, GC) and process
// (process_open_fds, process_resident_memory_bytes, CPU) collectors to a registry the Server
// owns; a caller's own Registry is left as the caller made it.
func registerRuntime(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// logDecision logs at debug level what the pipeline decided for one request: the window,
// the tokens per region before and after, each step with its reason, the summary in force
// and whether the request's prefix changed.
func logDecision(ctx context.Context, log *slog.Logger, rep *ctxmgr.Report, verbatim bool) {
	if !log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	steps := make([]string, 0, len(rep.Steps))
	for _, ev := range rep.Steps {
		steps = append(steps, fmt.Sprintf("%s (%s: %d -> %d tokens, %d messages)", ev.Step, ev.Reason, ev.Before, ev.After, ev.Messages))
	}
	decision := "rewritten"
	switch {
	case verbatim:
		decision = "forwarded verbatim"
	case len(rep.Steps) == 0:
		decision = "fits: re-encoded, unchanged"
	}
	log.LogAttrs(ctx, slog.LevelDebug, "proxy: pipeline decided",
		slog.String("decision", decision),
		slog.Int("window", rep.Window), slog.Int("max_output", rep.MaxOutput),
		slog.Int("input_before", rep.InputBefore), slog.Int("input_after", rep.InputAfter),
		slog.Any("regions_before", rep.Before), slog.Any("regions_after", rep.After),
		slog.Any("steps", steps), slog.Int("summary_version", rep.SummaryVersion),
		slog.Int("evicted", rep.Evicted), slog.Int("pinned", rep.Pinned),
		slog.Int("compactions", rep.Compactions), slog.Bool("prefix_changed", rep.PrefixChanged))
}
