package ctxmgr

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

func presetManager(t *testing.T, name string, window, maxOut int) (*Manager, *Session, *[]Event) {
	t.Helper()
	cfg, err := Preset(name, window, maxOut)
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	cfg.Store, cfg.Logger = store.NewMemory(), discardLogger()
	cfg.OnEvent = func(e Event) { events = append(events, e) }
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("preset %s: %v", name, err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := m.NewSession("p", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, s, &events
}

func TestPresetsValidate(t *testing.T) {
	for _, name := range Presets() {
		for _, w := range [][2]int{{200000, 32000}, {32768, 4096}, {131072, 8192}} {
			cfg, err := Preset(name, w[0], w[1])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := New(cfg); err != nil {
				t.Errorf("preset %s at %v: %v", name, w, err)
			}
		}
	}
	if _, err := Preset("nope", 1000, 100); err == nil {
		t.Fatal("unknown preset accepted")
	}
}

// QwenPaw offloads a 60,000-byte recent result and cuts an older one to 3,000 bytes.
func TestPresetQwenPaw(t *testing.T) {
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetQwenPaw, 200000, 32000)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call("c1"), chat.ToolResult("c1", "bash", lines(6000, "first result line"), false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Request.Messages[2].Text()); n > 50000 || !strings.Contains(p.Request.Messages[2].Text(), "offloaded") {
		t.Fatalf("recent 60 kB+ result: %d bytes in context, want offloaded under 50000", n)
	}
	appendAll(t, s, call("c2"), chat.ToolResult("c2", "bash", lines(1000, "r2"), false), call("c3"), chat.ToolResult("c3", "bash", lines(1000, "r3"), false))
	p, err = s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Request.Messages[2].Text()); n > 3000 {
		t.Fatalf("older result has %d bytes, want <= 3000", n)
	}
	if n := len(p.Request.Messages[6].Text()); n < 3000 {
		t.Fatalf("recent result was cut to %d bytes", n)
	}
}

// Picoclaw summarizes past 20 messages keeping the last turn-snapped 4.
func TestPresetPicoclaw(t *testing.T) {
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetPicoclaw, 200000, 32000)
	for i := 0; i < 10; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("q%d", i)), chat.TextMessage(chat.RoleAssistant, "a"))
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "q10"), call("c1"), chat.ToolResult("c1", "bash", "ok", false))
	p, err := s.Prepare(ctx) // 23 messages > 20
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.Compactions != 1 {
		t.Fatalf("compactions = %d", p.Report.Compactions)
	}
	// The last 4 messages ("a", "q10", call, result) snapped back to the start of their
	// turn: never fewer than 4 kept.
	live := p.Request.Messages[1:]
	if len(live) != 5 || live[0].Text() != "q9" {
		t.Fatalf("kept %d messages starting %q; want 5 from q9", len(live), live[0].Text())
	}
}

// BaseAgent prunes old tool output only when at least 20,000 tokens are freed.
func TestPresetBaseAgent(t *testing.T) {
	ctx := context.Background()
	_, s, events := presetManager(t, PresetBaseAgent, 200000, 32000)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	pruned := false
	var p Prepared
	for i := 0; i < 60 && !pruned; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, call(id), chat.ToolResult(id, "bash", lines(550, "output of "+id), false)) // ~2400 tokens each
		var err error
		if p, err = s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		for _, e := range *events {
			if e.Step == StepMask {
				pruned = true
				if e.Freed < 20000 {
					t.Fatalf("pruned only %d tokens", e.Freed)
				}
			}
		}
	}
	if !pruned {
		t.Fatal("never pruned")
	}
	if cfg := s.m.cfg; cfg.MaskKeep != 0 || cfg.seed.MaskProtectTokens != 40000 {
		t.Fatalf("baseagent masks with MaskKeep %d, MaskProtectTokens %d; its rule is tokens alone (0, 40000)", cfg.MaskKeep, cfg.seed.MaskProtectTokens)
	}
	// 40000 tokens of the newest tool output stay: the unmasked results, newest first, reach
	// 40000 tokens (by the preset's chars/4 estimate) before the first masked one, and no
	// result wholly beyond them is kept.
	c := s.m.cfg.Counter
	kept, sawMasked := 0, false
	for i := len(p.Request.Messages) - 1; i >= 0; i-- {
		m := &p.Request.Messages[i]
		if m.Role != chat.RoleTool {
			continue
		}
		masked := strings.Contains(m.Text(), "result masked")
		switch {
		case masked:
			sawMasked = true
		case sawMasked:
			t.Fatalf("an unmasked result older than a masked one")
		default:
			kept += c.Message(m)
		}
	}
	if !sawMasked || kept < 40000 || kept > 40000+3000 {
		t.Fatalf("kept %d tokens of the newest tool output unmasked (masked some: %v), want 40000 and at most one result more", kept, sawMasked)
	}
}

// CoPaw: no tool-result handling; compaction at 75% keeps a 10% reserve.
func TestPresetCoPaw(t *testing.T) {
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetCoPaw, 20000, 2000)
	compactions := 0
	for i := 0; i < 40; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("q%d %s", i, strings.Repeat("word ", 600))))
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		compactions += p.Report.Compactions
		if p.Report.InputAfter+2000 > 15000 {
			t.Fatalf("call %d left over 75%% of the window: %d", i, p.Report.InputAfter)
		}
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, "ok"))
	}
	if compactions == 0 {
		t.Fatal("never compacted")
	}
}

// CowAgent: summarize past 20 turns, keep the newest half.
func TestPresetCowAgent(t *testing.T) {
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetCowAgent, 200000, 32000)
	for i := 0; i < 21; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("q%d", i)), chat.TextMessage(chat.RoleAssistant, "a"))
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "q21"))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.Compactions != 1 {
		t.Fatalf("compactions = %d", p.Report.Compactions)
	}
	// 22 turns, newest half = 11 turns kept (q11..q21).
	if got := p.Request.Messages[1].Text(); got != "q11" {
		t.Fatalf("first kept message %q, want q11", got)
	}
}

// The default preset's documented rules: tool results above 10,000 bytes are capped at
// ingestion, a requested read keeps up to 40,000 bytes, the threshold is 95% with a 20%
// reserve, and the cost model (superseding, age-out to a snippet or a stub beyond the 2
// newest) and masking before summarizing are on.
func TestPresetDefault(t *testing.T) {
	cfg, err := Preset(PresetDefault, 200000, 32000)
	if err != nil {
		t.Fatal(err)
	}
	eff := cfg.WithDefaults()
	if eff.ToolResultCap != 10000 || eff.RequestedReadCap != 40000 || eff.Budget.Threshold != 0.95 || eff.Budget.Reserve != 0.20 ||
		!eff.AgeOut || !eff.Supersede || eff.CostMaskKeep != 2 || !eff.MaskBeforeSummary || eff.OldToolResultCap != 3000 || eff.PagedPastCap != 0 ||
		eff.DisableOffload || eff.DisableMasking || eff.seed != (seedRules{}) {
		t.Fatalf("default preset: %+v", eff)
	}
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetDefault, 200000, 32000)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call("c1"), chat.ToolResult("c1", "bash", lines(1200, "a bash result line"), false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Request.Messages[2].Text()); n > 11000 || !strings.Contains(p.Request.Messages[2].Text(), "offloaded") {
		t.Fatalf("a %d-byte result has %d bytes in context, want it capped at ingestion near 10000", len(lines(1200, "a bash result line")), n)
	}
}

// The masking baseline: no ingestion cap, no summaries, the 10 newest tool results kept and
// older ones masked on every call, whatever that frees.
func TestPresetMasking(t *testing.T) {
	cfg, err := Preset(PresetMasking, 200000, 32000)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DisableOffload || !cfg.DisableSummary || cfg.MaskKeep != 10 || !cfg.seed.NoMaskMinSaving || !cfg.seed.RollingRewrite {
		t.Fatalf("masking preset: %+v", cfg)
	}
	ctx := context.Background()
	_, s, _ := presetManager(t, PresetMasking, 200000, 32000)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, call(id), chat.ToolResult(id, "bash", lines(30, fmt.Sprintf("result %d line", i)), false))
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	masked := 0
	for _, m := range p.Request.Messages {
		if m.Role == chat.RoleTool && !strings.Contains(m.Text(), "line 1") {
			masked++
		}
	}
	if masked != 2 {
		t.Fatalf("%d of 12 tool results masked, want the 2 beyond the newest 10", masked)
	}
	if n := len(p.Request.Messages[len(p.Request.Messages)-1].Text()); n < 30*10 {
		t.Fatalf("the newest result was cut to %d bytes", n)
	}
}

// The explicit switches do what the negative values did and negative values are refused.
func TestConfigSwitches(t *testing.T) {
	eff := Config{DisableOffload: true, KeepOffloads: true, DisableMasking: true}.WithDefaults()
	if eff.ToolResultCap != 0 || eff.OffloadRetention != 0 || eff.MaskKeep != 0 || eff.RequestedReadCap != 0 {
		t.Fatalf("switches left defaults: %+v", eff)
	}
	for _, c := range []Config{{ToolResultCap: -1}, {MaskKeep: -1}, {MaskMinSaving: -1}, {RequestedReadCap: -1}, {OffloadRetention: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted: a negative value is no longer a switch", c)
		}
	}
	ctx := context.Background()
	m, err := New(Config{DisableOffload: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession("sw", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := lines(4000, "a long tool output line") // ~100 KB, above the default 50,000-byte cap
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call("c1"), chat.ToolResult("c1", "bash", big, false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Request.Messages[2].Text() != big {
		t.Fatal("DisableOffload: the result was capped")
	}
}

// A preset's Config means what the same values mean in any Config: New fills the fields it
// leaves zero with their defaults, WithDefaults changes nothing a preset set, and a zero set in
// a preset's Config afterwards is the default, as in a literal.
func TestPresetZeroIsDefault(t *testing.T) {
	names := []string{"ToolResultCap", "RequestedReadCap", "OldToolResultCap", "RecentToolResults", "MaskKeep",
		"MaskMinSaving", "SummaryTokens", "MaxRecoveries", "CostMaskKeep", "OffloadRetention"}
	of := func(c Config) []int64 {
		return []int64{int64(c.ToolResultCap), int64(c.RequestedReadCap), int64(c.OldToolResultCap), int64(c.RecentToolResults),
			int64(c.MaskKeep), int64(c.MaskMinSaving), int64(c.SummaryTokens), int64(c.MaxRecoveries), int64(c.CostMaskKeep),
			int64(c.OffloadRetention)}
	}
	for _, name := range Presets() {
		cfg, err := Preset(name, 200000, 32000)
		if err != nil {
			t.Fatal(err)
		}
		eff := cfg.WithDefaults()
		if eff.MaxRecoveries != 3 || eff.SummaryTokens == 0 || eff.RecentToolResults != 2 {
			t.Errorf("%s: defaults not filled: %v", name, of(eff))
		}
		if got := of(eff.WithDefaults()); !slices.Equal(got, of(eff)) {
			t.Errorf("%s: WithDefaults is not idempotent: %v, then %v", name, of(eff), got)
		}
		for k, v := range of(cfg) {
			if v != 0 && of(eff)[k] != v {
				t.Errorf("%s: %s set to %d became %d", name, names[k], v, of(eff)[k])
			}
		}
		// A zero set afterwards is the default, as in a literal with the same Budget and
		// switches.
		cfg.MaskKeep, cfg.SummaryTokens, cfg.MaskMinSaving, cfg.RecentToolResults = 0, 0, 0, 0
		lit := Config{Budget: cfg.Budget, DisableMasking: cfg.DisableMasking, seed: cfg.seed}.WithDefaults()
		if got := cfg.WithDefaults(); got.MaskKeep != lit.MaskKeep || got.SummaryTokens != lit.SummaryTokens ||
			got.MaskMinSaving != lit.MaskMinSaving || got.RecentToolResults != lit.RecentToolResults {
			t.Errorf("%s: zeros set after Preset became %v; a literal's are %v", name, of(got), of(lit))
		}
	}
	// Prices are the caller's: the preset leaves them, and New fills them if it does not.
	base, err := Preset(PresetBaseAgent, 200000, 32000)
	if err != nil {
		t.Fatal(err)
	}
	if base.Prices != (Prices{}) || base.WithDefaults().Prices != PricesAnthropic {
		t.Errorf("Prices: %+v from Preset, %+v after WithDefaults", base.Prices, base.WithDefaults().Prices)
	}
}
