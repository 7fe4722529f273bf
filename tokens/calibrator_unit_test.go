package tokens_test

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

func TestCalibratorBasics(t *testing.T) {
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	cal := tokens.NewCalibrator(h, tokens.CalibratorOptions{})
	if r, n := cal.Ratio("m"); r != 1 || n != 0 {
		t.Fatalf("fresh ratio %v, %d", r, n)
	}
	k := cal.Counter("m")
	if k.Name() != "calibrated(heuristic)" {
		t.Errorf("name %q", k.Name())
	}
	text := "The quick brown fox jumps over the lazy dog."
	if got, want := k.Text(text), int(math.Ceil(float64(h.Text(text))*1.02)); got != want {
		t.Errorf("uncalibrated text with margin: %d, want %d", got, want)
	}
	cal.Observe("m", 1000, 1100)
	if r, n := cal.Ratio("m"); math.Abs(r-1.1) > 1e-12 || n != 1 {
		t.Errorf("ratio %v, %d; want 1.1, 1", r, n)
	}
	// The counter follows the calibration.
	if got, want := k.Text(text), int(math.Ceil(float64(h.Text(text))*1.1*1.02-1e-9)); got != want {
		t.Errorf("calibrated text: %d, want %d", got, want)
	}
	// Older observations fade (default decay 0.5): (0.5*1100 + 1000*1.3) / (0.5*1000 + 1000).
	cal.Observe("m", 1000, 1300)
	if r, _ := cal.Ratio("m"); math.Abs(r-(0.5*1100+1300)/1500) > 1e-12 {
		t.Errorf("ratio after two: %v", r)
	}
	// Ignored and clamped observations.
	cal.Observe("m", 0, 100)
	cal.Observe("m", 100, -1)
	if _, n := cal.Ratio("m"); n != 2 {
		t.Errorf("non-positive observations were recorded: %d", n)
	}
	cal.Observe("x", 100, 100000)
	if r, _ := cal.Ratio("x"); r != tokens.DefaultMaxRatio {
		t.Errorf("absurd ratio not clamped: %v", r)
	}
	// Models are independent; Forget drops one.
	if r, _ := cal.Ratio("other"); r != 1 {
		t.Errorf("other model ratio %v", r)
	}
	cal.Forget("m")
	if _, n := cal.Ratio("m"); n != 0 {
		t.Error("Forget kept the model")
	}
	// No margin.
	none := tokens.NewCalibrator(h, tokens.CalibratorOptions{Margin: -1})
	if none.Margin() != 0 || none.Counter("m").Text(text) != h.Text(text) {
		t.Error("disabled margin")
	}
}

func TestCalibratedRequest(t *testing.T) {
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	cal := tokens.NewCalibrator(h, tokens.CalibratorOptions{Margin: 0.05})
	r := &chat.Request{
		System:   []chat.Message{chat.TextMessage(chat.RoleSystem, "You are terse.")},
		Tools:    []chat.Tool{{Name: "bash", Description: "Run a shell command."}},
		Messages: session(37),
	}
	e := cal.ObserveRequest("m", r, 0) // ignored (reported 0): returns the base estimate
	if e != h.Request(r).Total {
		t.Fatalf("ObserveRequest estimate %d", e)
	}
	cal.Observe("m", 1000, 873)
	b := cal.Counter("m").Request(r)
	f := 0.873 * 1.05
	if want := int(math.Ceil(float64(e) * f)); b.Total != want {
		t.Errorf("total %d, want %d", b.Total, want)
	}
	sum := b.System + b.Tools + b.Priming
	for _, m := range b.Messages {
		sum += m
	}
	if sum != b.Total || len(b.Messages) != 37 {
		t.Errorf("regions add up to %d, total %d", sum, b.Total)
	}
	base := h.Request(r)
	for i, m := range b.Messages {
		if v := float64(base.Messages[i]) * f; float64(m) < math.Floor(v)-1e-9 || float64(m) > math.Ceil(v)+1e-9 {
			t.Errorf("message %d: %d, scaled base %.2f", i, m, v)
		}
	}
	if z := cal.Counter("m").Request(nil); z.Total != 0 {
		t.Errorf("nil request %+v", z)
	}
}

func TestCalibratorEvictionAndConcurrency(t *testing.T) {
	cal := tokens.NewCalibrator(tokens.NewHeuristic(tokens.HeuristicOptions{}), tokens.CalibratorOptions{MaxModels: 3})
	for i := 0; i < 5; i++ {
		cal.Observe(fmt.Sprint("m", i), 100, 110)
	}
	kept := 0
	for i := 0; i < 5; i++ {
		if _, n := cal.Ratio(fmt.Sprint("m", i)); n > 0 {
			kept++
		}
	}
	if _, n := cal.Ratio("m4"); kept != 3 || n != 1 {
		t.Errorf("kept %d models (want 3, the newest among them)", kept)
	}
	var wg sync.WaitGroup
	msgs := session(20)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				cal.Observe("shared", 1000, 900+g)
				cal.Counter("shared").Request(&chat.Request{Messages: msgs})
				cal.Ratio("shared")
			}
		}(g)
	}
	wg.Wait()
	if r, n := cal.Ratio("shared"); n != 400 || r < 0.9 || r > 0.908 {
		t.Errorf("shared: %v, %d", r, n)
	}
}
