package ctxmgr

import (
	"errors"
	"testing"
)

func TestPricesExpected(t *testing.T) {
	p := PricesAnthropic
	// 30 calls so far: 30 expected to come. Saving 1000 tokens a call at 0.1 = 3000; the miss
	// of 5000 tokens at 1.15 = 5750: does not pay.
	if got := p.Expected(1000, 5000, 30); got != 30*1000*0.1-5000*1.15 {
		t.Fatalf("Expected = %v", got)
	}
	if p.Pays(1000, 5000, 30) {
		t.Fatal("a rewrite whose miss exceeds its saving pays")
	}
	// Near the end of the request (small tail) the same saving pays.
	if !p.Pays(1000, 500, 30) {
		t.Fatal("a rewrite saving 1000 tokens for 30 calls with a 500-token tail does not pay")
	}
	// More calls so far: more to come, so a larger tail pays.
	if !p.Pays(1000, 5000, 300) {
		t.Fatal("after 300 calls, a 1000-token saving with a 5000-token tail does not pay")
	}
	// At least three calls are expected even at the start: a rewrite saving 1000 tokens a
	// call with a 200-token tail pays on the first call.
	if got := p.Expected(100, 0, 0); got != 3*100*0.1 {
		t.Fatalf("Expected(100, 0, 0) = %v", got)
	}
	if !p.Pays(1000, 200, 1) {
		t.Fatal("early in a run, a rewrite saving 1000 tokens with a 200-token tail does not pay")
	}
	if p.Pays(0, 0, 100) || p.Pays(-5, 0, 100) {
		t.Fatal("a rewrite saving nothing pays")
	}
	// A cheaper cache write (OpenAI) makes the same rewrite cheaper.
	if PricesOpenAI.Expected(1000, 5000, 30) <= p.Expected(1000, 5000, 30) {
		t.Fatal("OpenAI prices do not make the miss cheaper")
	}
}

func TestBestBatch(t *testing.T) {
	p := PricesAnthropic
	// Three candidates; tails measured from their positions.
	cands := []rewriteCandidate{{pos: 10, save: 100}, {pos: 50, save: 3000}, {pos: 90, save: 3000}}
	tails := map[int]int{10: 40000, 50: 12000, 90: 4000}
	tail := func(pos int) int { return tails[pos] }
	from, v := p.bestBatch(cands, tail, 10)
	// From 90: 10*3000*0.1 - 1000*1.15 = 1850; from 50: 6000 - 6000*1.15 = -900; from 10 worse.
	if from != 2 || v != 3000-1000*1.15 {
		t.Fatalf("bestBatch = %d, %v; want 2, %v", from, v, 3000-1000*1.15)
	}
	// With many calls to come, the whole batch pays best.
	if from, _ := p.bestBatch(cands, tail, 30000); from != 0 {
		t.Fatalf("bestBatch after 30000 calls starts at %d; want 0", from)
	}
	// A lossy candidate pays only beyond its expected read-back, by its costs again: from 90
	// alone, 10*3000*0.1 - 1150 - 1500 = 350 is below 1150 + 1500.
	lossy := []rewriteCandidate{{pos: 90, save: 3000, risk: 1500}}
	if from, v := p.bestBatch(lossy, tail, 10); from != 1 || v != 0 {
		t.Fatalf("lossy batch short of its margin made: %d, %v", from, v)
	}
	// With less risk it pays: 3000 - 1150 - 200 = 1650 >= 1150 + 200.
	lossy[0].risk = 200
	if from, v := p.bestBatch(lossy, tail, 10); from != 0 || v != 3000-1150-200 {
		t.Fatalf("lossy batch past its margin not made: %d, %v", from, v)
	}
	// Nothing pays: none.
	if from, v := p.bestBatch([]rewriteCandidate{{pos: 1, save: 10}}, func(int) int { return 100000 }, 3); from != 1 || v != 0 {
		t.Fatalf("bestBatch = %d, %v; want none", from, v)
	}
}

func TestPricesByNameAndValidate(t *testing.T) {
	if p, err := PricesByName("openai"); err != nil || p != PricesOpenAI {
		t.Fatal(p, err)
	}
	if _, err := PricesByName("nope"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	cfg := Config{Prices: Prices{Uncached: 0.1, Cached: 1}}.WithDefaults()
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("cached dearer than uncached: %v", err)
	}
	cfg = Config{ReadTools: []ReadTool{{Name: "x"}}}.WithDefaults()
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("read tool without PathArg: %v", err)
	}
}
