package proxy

import (
	"log/slog"
	"strings"
	"testing"

	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

// TestOperatorVisibility: /metrics serves the Go runtime and process metrics beside the
// proxy's, and at debug level the log says what the pipeline decided for each request.
func TestOperatorVisibility(t *testing.T) {
	var logs syncBuffer
	const window = 6000
	e := newEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	a := newOpenAIAgent(e.px.URL, bigOutput(1800), ooption.WithHeader(SessionHeader, "ops"))
	buildTurns(ctxT(t), t, a, 12)

	status, body := get(t, e.px.URL+"/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	for _, name := range []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_open_fds ", "process_resident_memory_bytes ", "ctxmgr_requests_total"} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	l := logs.String()
	if n := strings.Count(l, `msg="proxy: pipeline decided"`); n < 12 {
		t.Errorf("%d debug decisions logged for 24 requests", n)
	}
	if !strings.Contains(l, "decision=rewritten") {
		t.Errorf("no compaction decision at debug level:\n%s", l)
	}
	// The decision names its steps with their reasons (masking or summarizing here).
	for _, line := range strings.Split(l, "\n") {
		if strings.Contains(line, "decision=rewritten") && strings.Contains(line, "steps=[]") {
			t.Errorf("a rewrite logged without its steps: %s", line)
		}
	}
}
