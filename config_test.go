package ctxmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// handBuilt returns a Config literal holding c's exported fields: what a user who copies the
// values of a Config by hand writes.
func handBuilt(c Config) Config {
	var out Config
	dst, src := reflect.ValueOf(&out).Elem(), reflect.ValueOf(c)
	for i := 0; i < dst.NumField(); i++ {
		if dst.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}

// tuningOf renders the plain-valued exported fields of c (not the components, not OnEvent):
// what two Configs that mean the same must agree on.
func tuningOf(c Config) string {
	v := reflect.ValueOf(c)
	var b strings.Builder
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		switch f.Type.Kind() {
		case reflect.Interface, reflect.Func, reflect.Pointer:
			continue
		}
		if f.IsExported() {
			fmt.Fprintf(&b, "%s=%v ", f.Name, v.Field(i).Interface())
		}
	}
	return b.String()
}

// runScenario drives a session of an agent that reads, re-reads and runs commands through
// a small window (offloads, supersedes, age-out, masking and summaries all happen) and
// returns every request it prepared and every event, as text.
func runScenario(t *testing.T, cfg Config) []string {
	t.Helper()
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg.Store, cfg.Logger, cfg.Now = store.NewMemory(), discardLogger(), func() time.Time { return clock }
	var out []string
	cfg.OnEvent = func(e Event) {
		b, _ := json.Marshal(e)
		out = append(out, "event "+string(b))
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession("same", []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	readCall := func(id, path string) chat.Message {
		return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "read_file", Arguments: `{"path":"` + path + `"}`}}}
	}
	for i := 0; i < 36; i++ {
		if i%6 == 0 {
			appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("task %d: fix the handler", i/6)))
		}
		id := fmt.Sprintf("c%d", i)
		switch i % 3 {
		case 0: // a large command output
			appendAll(t, s, call(id), chat.ToolResult(id, "bash", lines(500+100*(i%5), fmt.Sprintf("build output %d line", i)), false))
		case 1: // a file read again and again
			appendAll(t, s, readCall(id, fmt.Sprintf("pkg/f%d.go", i%4)), chat.ToolResult(id, "read_file", lines(120, fmt.Sprintf("func f%d() // line", i%4)), false))
		default:
			appendAll(t, s, call(id), chat.ToolResult(id, "bash", "ok", false))
		}
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(p.Request.Messages)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("request %d: %s", i, b))
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("step %d: %s", i, strings.Repeat("what the output shows ", 60))))
	}
	return out
}

// A Config means the same wherever it came from: a preset's, the same values written by
// hand, the same after WithDefaults, and a zero set in any of them is the default. The
// scenario's requests and events are the same for each, and so are the values New settles on.
func TestConfigMeansTheSameEverywhere(t *testing.T) {
	const window, maxOut = 16000, 2000
	p, err := Preset(PresetDefault, window, maxOut)
	if err != nil {
		t.Fatal(err)
	}
	// Zeros set in a preset's Config and in the same values written by hand.
	zeroed := func(c Config) Config {
		c.MaskMinSaving, c.SummaryTokens, c.RecentToolResults, c.OffloadRetention = 0, 0, 0, 0
		return c
	}
	variants := []struct {
		name string
		cfg  Config
	}{
		{"preset", p},
		{"hand-built", handBuilt(p)},
		{"preset after WithDefaults", p.WithDefaults()},
		{"hand-built from WithDefaults", handBuilt(p.WithDefaults())},
		{"preset, zeros set", zeroed(p.WithDefaults())},
		{"hand-built, zeros set", zeroed(handBuilt(p))},
	}
	base := runScenario(t, variants[0].cfg)
	steps := map[string]bool{}
	for _, line := range base {
		for _, st := range []Step{StepOffload, StepSupersede, StepMask, StepSummarize} {
			if strings.Contains(line, `"step":"`+string(st)+`"`) {
				steps[string(st)] = true
			}
		}
	}
	if len(steps) < 4 {
		t.Fatalf("the scenario exercises too little of the pipeline: %v", steps)
	}
	zeroBase := runScenario(t, variants[4].cfg)
	for k, v := range variants {
		want := base
		if k >= 4 {
			want = zeroBase
		}
		if got := runScenario(t, v.cfg); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the session differs from the %s one", v.name, variants[k/4*4].name)
		}
	}
	// New settles on the same values: the zeros set are the defaults, as in a literal.
	mk := func(c Config) Config {
		c.Logger = discardLogger()
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return m.Config()
	}
	if a, b := tuningOf(mk(variants[4].cfg)), tuningOf(mk(variants[5].cfg)); a != b {
		t.Errorf("zeros set after Preset and WithDefaults:\n%s\nby hand:\n%s", a, b)
	}
	if a, b := tuningOf(mk(Config{})), tuningOf(mk(Config{}.WithDefaults())); a != b {
		t.Errorf("Config{}:\n%s\nConfig{}.WithDefaults():\n%s", a, b)
	}
	lit := mk(Config{Budget: budget.Window{Window: window, MaxOutput: maxOut}})
	if z := mk(variants[4].cfg); z.MaskMinSaving != lit.MaskMinSaving || z.SummaryTokens != lit.SummaryTokens ||
		z.RecentToolResults != lit.RecentToolResults || z.OffloadRetention != lit.OffloadRetention {
		t.Errorf("zeros set in a preset's Config: %s\nthe defaults: %s", tuningOf(z), tuningOf(lit))
	}
}

// Every invalid value is reported as a *ConfigError naming its field, wrapping
// ErrInvalidConfig; a Budget field's also unwraps to its *budget.ConfigError. A negative
// number is an error, never a way to say off.
func TestConfigValidateErrors(t *testing.T) {
	cases := []struct {
		field string
		cfg   Config
	}{
		{"Budget.Threshold", Config{Budget: budget.Window{Threshold: 2}}},
		{"Budget.SafetyMargin", Config{Budget: budget.Window{SafetyMargin: -1}}},
		{"Budget.SafetyMargin", Config{Budget: budget.Window{SafetyMargin: 0.05, NoSafetyMargin: true}}},
		{"Budget.Reserve", Config{Budget: budget.Window{Reserve: -1}}},
		{"Prices", Config{Prices: Prices{Uncached: 0.1, Cached: 1}}},
		{"ReadTools[1]", Config{ReadTools: []ReadTool{{Name: "open", PathArg: "p"}, {Name: "x"}}}},
		{"ToolResultCap", Config{ToolResultCap: -1}},
		{"ToolResultCap", Config{ToolResultCap: 100}},
		{"RequestedReadCap", Config{RequestedReadCap: -1}},
		{"OldToolResultCap", Config{OldToolResultCap: -1}},
		{"OldToolResultCap", Config{OldToolResultCap: 10}},
		{"PagedPastCap", Config{PagedPastCap: 100}},
		{"RecentToolResults", Config{RecentToolResults: -1}},
		{"CostMaskKeep", Config{CostMaskKeep: -1}},
		{"MaskKeep", Config{MaskKeep: -1}},
		{"MaskMinSaving", Config{MaskMinSaving: -1}},
		{"OffloadRetention", Config{OffloadRetention: -time.Hour}},
		{"SummaryTokens", Config{SummaryTokens: -1}},
		{"SummaryTokens", Config{SummaryTokens: 100000}},
		{"MaxRecoveries", Config{MaxRecoveries: 11}},
		{"MaxRecoveries", Config{MaxRecoveries: -1}},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want a *ConfigError on %s", c.cfg, err, c.field)
			continue
		}
		if be := new(budget.ConfigError); strings.HasPrefix(c.field, "Budget.") && (!errors.As(err, &be) || "Budget."+be.Field != c.field) {
			t.Errorf("%s: %v does not unwrap to its *budget.ConfigError", c.field, err)
		}
	}
	// A seed preset's trigger must fit the window a caller set after it.
	cow, err := Preset(PresetCowAgent, 200000, 32000)
	if err != nil {
		t.Fatal(err)
	}
	cow.Budget.Window = 60000
	var ce *ConfigError
	if _, err := New(cow); !errors.As(err, &ce) || ce.Field != "Budget.Window" {
		t.Errorf("cowagent with a window below its trigger: %v", err)
	}
	// Validate checks a Config as it is: a nil component is an error.
	noStore := Config{}.WithDefaults()
	noStore.Store = nil
	if err := noStore.Validate(); !errors.As(err, &ce) || ce.Field != "Store" {
		t.Errorf("a Config without a Store: %v, want a *ConfigError on Store", err)
	}
}

// An exact counter the caller supplies keeps the safety margin unless Budget.NoSafetyMargin
// says otherwise; the default counter comes without one, and a margin set is kept.
func TestConfigSafetyMargin(t *testing.T) {
	w := budget.Window{Window: 100000, MaxOutput: 4000}
	if c := (Config{Budget: w}).WithDefaults(); c.Budget.MarginTokens() != 0 || !c.Budget.NoSafetyMargin {
		t.Errorf("default counter: margin %d tokens", c.Budget.MarginTokens())
	}
	set := w
	set.SafetyMargin = 0.01
	if c := (Config{Budget: set}).WithDefaults(); c.Budget.MarginTokens() != 1000 || c.Budget.NoSafetyMargin {
		t.Errorf("default counter, margin set: %d tokens", c.Budget.MarginTokens())
	}
	exact := defaultCounter()
	if c := (Config{Budget: w, Counter: exact}).WithDefaults(); c.Budget.MarginTokens() != 2000 {
		t.Errorf("a counter of the caller's: margin %d tokens, want the default 2%%", c.Budget.MarginTokens())
	}
	off := w
	off.NoSafetyMargin = true
	if c := (Config{Budget: off, Counter: exact}).WithDefaults(); c.Budget.MarginTokens() != 0 {
		t.Errorf("NoSafetyMargin: margin %d tokens", c.Budget.MarginTokens())
	}
}
