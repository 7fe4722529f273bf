package replay

import (
	"context"
	"testing"
)

func TestParseSweep(t *testing.T) {
	for name, want := range map[string]int{"default@10": 10, "default@off": 0, SweepStrategy(25): 25, SweepStrategy(0): 0} {
		if n, ok := parseSweep(name); !ok || n != want {
			t.Errorf("parseSweep(%q) = %d, %v", name, n, ok)
		}
	}
	for _, bad := range []string{"default", "default@", "default@-1", "default@x", "masking@10"} {
		if _, ok := parseSweep(bad); ok {
			t.Errorf("parseSweep(%q) accepted", bad)
		}
	}
	if _, err := Run(context.Background(), nil, Options{Strategies: []string{"default@x"}}); err == nil {
		t.Error("Run accepted an invalid sweep strategy")
	}
}

// The knob moves default along the frontier: masking sooner costs less and recalls no more.
func TestSweepMovesAlongFrontier(t *testing.T) {
	trs, err := LongRuns(LongRunCoding, "coding-tuning", LongRunTuningSeeds()[:1])
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), trs, Options{Strategies: []string{StrategyRaw, SweepStrategy(10), SweepStrategy(0)}, Counter: measuring(t), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	low, off := res.Strategies[1], res.Strategies[2]
	t.Logf("default@10: %.3fx raw, recall %.4f; default@off: %.3fx raw, recall %.4f", low.CostVsRaw, low.Recall, off.CostVsRaw, off.Recall)
	if low.Cost >= off.Cost || low.Recall > off.Recall {
		t.Fatalf("default@10 (%.3f, %.4f) is not cheaper and no better-recalling than default@off (%.3f, %.4f)", low.Cost, low.Recall, off.Cost, off.Recall)
	}
}
