package tokens_test

import (
	"math"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// calibrationResult is the share of steps whose estimate lands within 5% of the reported
// prompt tokens.
type calibrationResult struct {
	within, withinMargin, naive, steps int
	under, underMargin                 int // estimates below the reported figure
	worst, worstMargin                 float64
}

func within5(est, reported int) bool {
	return math.Abs(float64(est-reported)) <= 0.05*float64(reported)
}

// replayCalibration replays every run step by step: before step k it estimates step k's
// prompt with a counter calibrated on steps < k of the same run only (a fresh Calibrator per
// run), then observes step k's reported figure. Steps after the second of each run are scored.
// The naive baseline is a characters-per-token moving average: total characters over total
// reported tokens of the steps seen so far, applied to the characters of the new prompt.
func replayCalibration(t *testing.T, runs []trajRun, base tokens.Counter) calibrationResult {
	var res calibrationResult
	const model = "google/gemini-3-pro-preview"
	for ri := range runs {
		run := &runs[ri]
		cal := tokens.NewCalibrator(base, tokens.CalibratorOptions{})                   // default 2% margin
		calNoMargin := tokens.NewCalibrator(base, tokens.CalibratorOptions{Margin: -1}) // margin disabled
		var naiveChars, naiveTokens float64
		for k, step := range run.Steps {
			req := promptOf(run, step)
			chars := 0
			for i := range req.System {
				chars += len([]rune(req.System[i].Text()))
			}
			for i := range req.Messages {
				chars += len([]rune(req.Messages[i].Text()))
			}
			if k >= 2 {
				res.steps++
				est := calNoMargin.Counter(model).Request(req).Total
				estM := cal.Counter(model).Request(req).Total
				naive := int(math.Round(float64(chars) * naiveTokens / naiveChars))
				rel := math.Abs(float64(est-step.Reported)) / float64(step.Reported)
				relM := math.Abs(float64(estM-step.Reported)) / float64(step.Reported)
				res.worst, res.worstMargin = math.Max(res.worst, rel), math.Max(res.worstMargin, relM)
				if within5(est, step.Reported) {
					res.within++
				}
				if within5(estM, step.Reported) {
					res.withinMargin++
				}
				if within5(naive, step.Reported) {
					res.naive++
				}
				if est < step.Reported {
					res.under++
				}
				if estM < step.Reported {
					res.underMargin++
				}
			}
			e := base.Request(req).Total
			cal.Observe(model, e, step.Reported)
			calNoMargin.Observe(model, e, step.Reported)
			naiveChars += float64(chars)
			naiveTokens += float64(step.Reported)
		}
	}
	return res
}

func pct(n, d int) float64 { return 100 * float64(n) / float64(max(d, 1)) }

// TestCalibrationTrajectories is the calibration requirement on real Gemini 3 Pro runs: the
// calibrated heuristic estimates each step's prompt within 5% of the provider's reported
// figure for at least 95% of the steps after the second, with and without the safety margin.
// On the 12 mini-swe-agent runs of the embedded sample (330 steps) it does for 98.8% of
// them either way; on the 42 runs of the project's larger data set, 99.2% and 99.5%.
func TestCalibrationTrajectories(t *testing.T) {
	t.Parallel()
	runs := loadTrajectories(t)
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	base := &replayCounter{Counter: h, memo: map[*chat.Message]int{}}
	for ri := range runs { // the memoized sums are the heuristic's own Request
		run := &runs[ri]
		req := promptOf(run, run.Steps[len(run.Steps)-1])
		if got, want := base.Request(req).Total, h.Request(req).Total; got != want {
			t.Fatalf("%s: replay counter %d != heuristic Request %d", run.Name, got, want)
		}
	}
	res := replayCalibration(t, runs, base)
	t.Logf("%d runs, %d scored steps (after the second of each run)", len(runs), res.steps)
	t.Logf("calibrated heuristic, no margin:  %.2f%% within 5%% (worst %.1f%%, %.1f%% of estimates below reported)",
		pct(res.within, res.steps), 100*res.worst, pct(res.under, res.steps))
	t.Logf("calibrated heuristic, 2%% margin: %.2f%% within 5%% (worst %.1f%%, %.1f%% of estimates below reported)",
		pct(res.withinMargin, res.steps), 100*res.worstMargin, pct(res.underMargin, res.steps))
	t.Logf("naive chars-per-token moving average: %.2f%% within 5%%", pct(res.naive, res.steps))
	if res.steps == 0 {
		t.Fatal("no steps scored")
	}
	if p := pct(res.within, res.steps); p < 95 {
		t.Errorf("calibrated estimate without margin within 5%% on %.2f%% of steps, want >= 95%%", p)
	}
	if p := pct(res.withinMargin, res.steps); p < 95 {
		t.Errorf("calibrated estimate with margin within 5%% on %.2f%% of steps, want >= 95%%", p)
	}
	if res.underMargin >= res.under && res.under > 0 {
		t.Errorf("the margin did not reduce underestimates: %d with, %d without", res.underMargin, res.under)
	}
}

// TestHeuristicUncalibrated logs how far the bare heuristic is from Gemini's count on each
// run's first prompt (before any calibration), as a sanity check of the defaults.
func TestHeuristicUncalibrated(t *testing.T) {
	t.Parallel()
	runs := loadTrajectories(t)
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	var sum, sum2 float64
	n := 0
	for ri := range runs {
		run := &runs[ri]
		if len(run.Steps) == 0 {
			continue
		}
		r := float64(run.Steps[0].Reported) / float64(h.Request(promptOf(run, run.Steps[0])).Total)
		sum += r
		sum2 += r * r
		n++
	}
	mean := sum / float64(n)
	sd := math.Sqrt(math.Max(0, sum2/float64(n)-mean*mean))
	t.Logf("first prompts: reported/heuristic mean %.3f, sd %.3f over %d runs", mean, sd, n)
	if mean < 0.5 || mean > 2 {
		t.Errorf("the heuristic is off by more than 2x on first prompts: ratio %.3f", mean)
	}
}

// replayCounter wraps a counter for the replay: each message of a run is counted once (memoized
// by its address in the run's slice, which the replay never changes) and a request costs the
// sum of its messages plus the reply priming, as the package frames it. Counting every prefix
// of every run afresh would re-hash or re-count ~100 MB of text, too slow under -race; the
// test checks that the sums agree with the wrapped counter's own Request.
type replayCounter struct {
	tokens.Counter
	memo map[*chat.Message]int
}

func (c *replayCounter) Message(m *chat.Message) int {
	n, ok := c.memo[m]
	if !ok {
		n = c.Counter.Message(m)
		c.memo[m] = n
	}
	return n
}

func (c *replayCounter) Request(r *chat.Request) tokens.Breakdown {
	var b tokens.Breakdown
	for i := range r.System {
		b.System += c.Message(&r.System[i])
	}
	b.Tools = c.Counter.Tools(r.Tools)
	b.Messages = make([]int, len(r.Messages))
	for i := range r.Messages {
		b.Messages[i] = c.Message(&r.Messages[i])
	}
	b.Priming = tokens.ReplyPriming
	b.Total = b.System + b.Tools + b.Priming
	for _, n := range b.Messages {
		b.Total += n
	}
	return b
}
