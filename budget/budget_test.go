package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	d := DefaultWindow()
	if d.Window != 200000 || d.MaxOutput != 32000 || d.Threshold != 0.80 || d.SoftThreshold != 0.60 ||
		d.Reserve != 0.10 || d.SafetyMargin != 0.02 {
		t.Fatalf("DefaultWindow() = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if got := (Window{}).WithDefaults(); got != d {
		t.Fatalf("Window{}.WithDefaults() = %+v, want %+v", got, d)
	}
	if d.MarginTokens() != 4000 || d.ReserveTokens() != 20000 || d.ThresholdTokens() != 160000 || d.SoftTokens() != 120000 {
		t.Fatalf("default tokens: margin %d reserve %d threshold %d soft %d", d.MarginTokens(), d.ReserveTokens(), d.ThresholdTokens(), d.SoftTokens())
	}
}

func TestWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Window
		want Window
	}{
		{"small window caps max output", Window{Window: 8192},
			Window{Window: 8192, MaxOutput: 2048, Threshold: 0.8, SoftThreshold: 0.6, Reserve: 0.1, SafetyMargin: 0.02}},
		{"low threshold caps soft", Window{Window: 100000, MaxOutput: 1000, Threshold: 0.5},
			Window{Window: 100000, MaxOutput: 1000, Threshold: 0.5, SoftThreshold: 0.5, Reserve: 0.1, SafetyMargin: 0.02}},
		{"no safety margin", Window{Window: 1000, MaxOutput: 100, Threshold: 0.9, SoftThreshold: 0.7, NoSafetyMargin: true},
			Window{Window: 1000, MaxOutput: 100, Threshold: 0.9, SoftThreshold: 0.7, Reserve: 0.1, NoSafetyMargin: true}},
		{"invalid kept", Window{Window: -5, MaxOutput: -1, Threshold: 2},
			Window{Window: -5, MaxOutput: -1, Threshold: 2, SoftThreshold: 0.6, Reserve: 0.1, SafetyMargin: 0.02}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.WithDefaults()
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if again := got.WithDefaults(); again != got {
				t.Fatalf("not idempotent: %+v -> %+v", got, again)
			}
		})
	}
	w := Window{Window: 1000, MaxOutput: 100, NoSafetyMargin: true}.WithDefaults()
	if w.MarginTokens() != 0 || w.SafetyMargin != 0 {
		t.Fatalf("NoSafetyMargin: margin %v, %d tokens", w.SafetyMargin, w.MarginTokens())
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultWindow()
	with := func(f func(*Window)) Window { w := ok; f(&w); return w }
	tests := []struct {
		name  string
		w     Window
		field string // "" = valid
	}{
		{"default", ok, ""},
		{"exact counter", with(func(w *Window) { w.SafetyMargin, w.NoSafetyMargin = 0, true }), ""},
		{"no margin with a margin", with(func(w *Window) { w.NoSafetyMargin = true }), "SafetyMargin"},
		{"zero margin and reserve", with(func(w *Window) { w.SafetyMargin = 0; w.Reserve = 0 }), ""},
		{"threshold 1", with(func(w *Window) { w.Threshold = 1; w.SoftThreshold = 1 }), ""},
		{"zero max output", with(func(w *Window) { w.MaxOutput = 0 }), ""},
		{"window zero", with(func(w *Window) { w.Window = 0 }), "Window"},
		{"window negative", with(func(w *Window) { w.Window = -1 }), "Window"},
		{"max output negative", with(func(w *Window) { w.MaxOutput = -1 }), "MaxOutput"},
		{"window equals max output", with(func(w *Window) { w.MaxOutput = w.Window }), "MaxOutput"},
		{"window below max output", with(func(w *Window) { w.MaxOutput = w.Window + 1 }), "MaxOutput"},
		{"threshold zero", with(func(w *Window) { w.Threshold = 0 }), "Threshold"},
		{"threshold above 1", with(func(w *Window) { w.Threshold = 1.01 }), "Threshold"},
		{"threshold NaN", with(func(w *Window) { w.Threshold = math.NaN() }), "Threshold"},
		{"soft zero", with(func(w *Window) { w.SoftThreshold = 0 }), "SoftThreshold"},
		{"soft negative", with(func(w *Window) { w.SoftThreshold = -0.5 }), "SoftThreshold"},
		{"soft above threshold", with(func(w *Window) { w.SoftThreshold = 0.9 }), "SoftThreshold"},
		{"reserve 1", with(func(w *Window) { w.Reserve = 1 }), "Reserve"},
		{"reserve negative", with(func(w *Window) { w.Reserve = -0.1 }), "Reserve"},
		{"reserve NaN", with(func(w *Window) { w.Reserve = math.NaN() }), "Reserve"},
		{"margin 1", with(func(w *Window) { w.SafetyMargin = 1 }), "SafetyMargin"},
		{"margin negative", with(func(w *Window) { w.SafetyMargin = -0.5 }), "SafetyMargin"},
		{"margin -1, once a sentinel", with(func(w *Window) { w.SafetyMargin = -1 }), "SafetyMargin"},
		{"reserve -1, once a sentinel", with(func(w *Window) { w.Reserve = -1 }), "Reserve"},
		{"margin plus output fill window", Window{Window: 1000, MaxOutput: 900, Threshold: 1, SoftThreshold: 1, SafetyMargin: 0.1}, "SafetyMargin"},
		{"threshold not above output", Window{Window: 1000, MaxOutput: 500, Threshold: 0.5, SoftThreshold: 0.5}, "Threshold"},
		{"reserve eats compactable zone", Window{Window: 1000, MaxOutput: 500, Threshold: 0.8, SoftThreshold: 0.6, Reserve: 0.3}, "Reserve"},
		{"reserve just below limit", Window{Window: 1000, MaxOutput: 500, Threshold: 0.8, SoftThreshold: 0.6, Reserve: 0.299}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.w.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("want *ConfigError on %s, got %v", tt.field, err)
			}
			if ce.Field != tt.field {
				t.Fatalf("field %q, want %q (%v)", ce.Field, tt.field, err)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not wrap ErrInvalidConfig or name the field", err)
			}
		})
	}
}

func TestBreakdown(t *testing.T) {
	// Window 1000, output 100, margin 20, threshold 800, soft 600, reserve 100.
	w := Window{Window: 1000, MaxOutput: 100, Threshold: 0.8, SoftThreshold: 0.6, Reserve: 0.1, SafetyMargin: 0.02}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	type want struct {
		budget, thrHist, softHist, free, compactable, excess int
		soft, thr, over, noRoom                              bool
	}
	tests := []struct {
		name string
		w    Window
		r    Regions
		want want
	}{
		{"zero regions", w, Regions{},
			want{budget: 880, thrHist: 700, softHist: 500, free: 880}},
		{"under soft", w, Regions{System: 50, Tools: 50, Summary: 0, History: 400},
			want{budget: 780, thrHist: 600, softHist: 400, free: 380, compactable: 300}},
		{"exactly at soft", w, Regions{System: 100, History: 400},
			want{budget: 780, thrHist: 600, softHist: 400, free: 380, compactable: 300}},
		{"one over soft", w, Regions{System: 100, History: 401},
			want{budget: 780, thrHist: 600, softHist: 400, free: 379, compactable: 301, soft: true}},
		{"exactly at threshold", w, Regions{System: 100, Tools: 50, Summary: 50, History: 500},
			want{budget: 680, thrHist: 500, softHist: 300, free: 180, compactable: 400, soft: true}},
		{"one over threshold", w, Regions{System: 100, Tools: 50, Summary: 50, History: 501},
			want{budget: 680, thrHist: 500, softHist: 300, free: 179, compactable: 401, excess: 1, soft: true, thr: true}},
		{"exactly at budget", w, Regions{History: 880},
			want{budget: 880, thrHist: 700, softHist: 500, free: 0, compactable: 780, excess: 180, soft: true, thr: true}},
		{"one over budget", w, Regions{History: 881},
			want{budget: 880, thrHist: 700, softHist: 500, free: -1, compactable: 781, excess: 181, soft: true, thr: true, over: true}},
		{"summary counts against history", w, Regions{Summary: 300, History: 401},
			want{budget: 580, thrHist: 400, softHist: 200, free: 179, compactable: 301, excess: 1, soft: true, thr: true}},
		{"system alone exceeds window", w, Regions{System: 1200},
			want{budget: -320, thrHist: -500, softHist: -700, free: -320, excess: 500, soft: true, thr: true, over: true, noRoom: true}},
		{"fixed regions leave exactly nothing", w, Regions{System: 880},
			want{budget: 0, thrHist: -180, softHist: -380, free: 0, excess: 180, soft: true, thr: true}},
		{"negative budget with history", w, Regions{System: 500, Tools: 400, History: 10},
			want{budget: -20, thrHist: -200, softHist: -400, free: -30, excess: 210, soft: true, thr: true, over: true, noRoom: true}},
		{"threshold 1 capped by margin", Window{Window: 1000, MaxOutput: 100, Threshold: 1, SoftThreshold: 1, Reserve: 0.1, SafetyMargin: 0.02},
			Regions{History: 881},
			want{budget: 880, thrHist: 880, softHist: 880, free: -1, compactable: 781, excess: 1, soft: true, thr: true, over: true}},
		{"exact counter no margin", Window{Window: 1000, MaxOutput: 100, Threshold: 1, SoftThreshold: 0.5, NoSafetyMargin: true},
			Regions{History: 900},
			want{budget: 900, thrHist: 900, softHist: 400, free: 0, compactable: 900, soft: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Breakdown(tt.w, tt.r)
			got := want{p.HistoryBudget, p.ThresholdHistory, p.SoftHistory, p.Free, p.Compactable, p.Excess,
				p.OverSoft, p.OverThreshold, p.OverBudget, p.NoRoom}
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v\n%s", got, tt.want, p)
			}
			if p.Input != tt.r.System+tt.r.Tools+tt.r.Summary+tt.r.History {
				t.Fatalf("Input %d", p.Input)
			}
			if p.Fits != !p.OverBudget || p.Fits != (p.Free >= 0) {
				t.Fatalf("Fits %v, OverBudget %v, Free %d", p.Fits, p.OverBudget, p.Free)
			}
			// The decisions agree with the whole-request form of each rule.
			if p.OverThreshold != (p.Input+p.MaxOutput > p.ThresholdTokens) ||
				p.OverSoft != (p.Input+p.MaxOutput > p.SoftTokens) ||
				p.OverBudget != (p.Input+p.MaxOutput+p.Margin > p.Window) {
				t.Fatalf("history-limit form and whole-request form disagree: %s", p)
			}
			if p.OverBudget && !p.OverThreshold || p.OverThreshold && !p.OverSoft {
				t.Fatalf("implications broken: %s", p)
			}
			if s := p.String(); !strings.Contains(s, "window 1000") {
				t.Fatalf("String() = %q", s)
			}
		})
	}
}

func TestBreakdownDefaultWindow(t *testing.T) {
	// The design's example: 200000 window, 32000 output. The threshold history limit is
	// 0.8*200000 - fixed - 32000, never 0.8*200000 of history alone.
	p := Breakdown(DefaultWindow(), Regions{System: 5000, Tools: 3000, Summary: 2000, History: 118000})
	if p.ThresholdHistory != 160000-5000-3000-2000-32000 || p.OverThreshold {
		t.Fatalf("%s", p)
	}
	p = Breakdown(DefaultWindow(), Regions{System: 5000, Tools: 3000, Summary: 2000, History: 118001})
	if !p.OverThreshold || p.OverBudget || p.Excess != 1 {
		t.Fatalf("%s", p)
	}
	if p.HistoryBudget != 200000-5000-3000-2000-32000-4000 {
		t.Fatalf("%s", p)
	}
}

func TestRatioTokensRounding(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		n    int
		ceil bool
		want int
	}{
		{0.8, 200000, false, 160000},
		{0.02, 200000, true, 4000},
		{0.1, 3, false, 0},
		{0.1, 3, true, 1},
		{0.7, 10, false, 7}, // 0.7*10 = 7.000000000000001 in float64
		{0.29, 100, true, 29},
		{-1, 1000, true, 0},
		{math.NaN(), 1000, true, 0},
	} {
		if got := ratioTokens(tc.r, tc.n, tc.ceil); got != tc.want {
			t.Errorf("ratioTokens(%v, %d, %v) = %d, want %d", tc.r, tc.n, tc.ceil, got, tc.want)
		}
	}
}
