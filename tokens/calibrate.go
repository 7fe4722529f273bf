package tokens

import (
	"math"
	"sort"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// CalibratorOptions tunes a Calibrator. Zero fields take the defaults.
type CalibratorOptions struct {
	// Margin is the safety margin added on top of the calibrated estimate, as a fraction:
	// 0.02 makes estimates 2% higher. Zero means DefaultMargin; a negative value disables the
	// margin.
	Margin float64
	// Decay is the weight an observation keeps each time a newer one arrives, in (0, 1).
	// Default 0.5: the last few requests dominate. See Calibrator.
	Decay float64
	// MinRatio and MaxRatio clamp each observation's ratio reported/estimated, so that one
	// absurd report (a provider counting cached tokens apart, a request truncated by a
	// proxy) cannot wreck the estimate. Defaults 0.2 and 5.
	MinRatio, MaxRatio float64
	// MaxModels bounds the number of models (keys) remembered; when a new key would exceed
	// it, the key observed least recently is forgotten. Default 4096.
	MaxModels int
}

// Calibrator defaults.
const (
	DefaultMargin    = 0.02
	DefaultDecay     = 0.5
	DefaultMinRatio  = 0.2
	DefaultMaxRatio  = 5
	DefaultMaxModels = 4096
)

// Calibrator learns, per model, the ratio between the provider's reported prompt tokens and a
// base counter's estimate of the same request, online, and hands out counters scaled by it.
//
// The estimator is a ratio of exponentially weighted sums, sum(w*reported)/sum(w*estimated),
// with weights halving (Decay) at each newer observation. Two properties of real traffic make
// it robust. First, consecutive prompts of an agent loop share their prefix: request k+1 is
// request k plus a reply and a tool result, so the latest observation already measures
// almost all of the next request, and weighting recent observations heavily makes the
// estimate of request k+1 nearly "reported(k) + ratio * estimate(new messages)", whose error
// is confined to the new messages. Second, a ratio of sums weights observations by their size,
// so a tiny request whose ratio is dominated by framing noise barely moves the estimate of a
// large one. TestCalibrationTrajectories requires, on 42 real Gemini runs, the calibrated
// heuristic to land within 5% of the reported figure on at least 95% of the steps after the
// second of each run (the measured share is in docs/benchmarks.md).
//
// The key is any string: a model name, or a model name plus a session id to calibrate each
// conversation on its own. Observe with the base counter's estimate (ObserveRequest does
// that), never with a calibrated one, or the calibration feeds on itself.
//
// A Calibrator is safe for concurrent use.
type Calibrator struct {
	base               Counter
	margin, decay      float64
	minRatio, maxRatio float64
	maxModels          int
	mu                 sync.RWMutex
	models             map[string]*calState
	clock              uint64
}

type calState struct {
	rep, est float64 // weighted sums
	n        int
	used     uint64
}

// NewCalibrator returns a Calibrator over base (typically NewCache(NewHeuristic(...), n)).
func NewCalibrator(base Counter, opts CalibratorOptions) *Calibrator {
	c := &Calibrator{
		base:      base,
		margin:    opts.Margin,
		decay:     opts.Decay,
		minRatio:  orDefault(opts.MinRatio, DefaultMinRatio),
		maxRatio:  orDefault(opts.MaxRatio, DefaultMaxRatio),
		maxModels: opts.MaxModels,
		models:    make(map[string]*calState),
	}
	switch {
	case c.margin == 0 || math.IsNaN(c.margin):
		c.margin = DefaultMargin
	case c.margin < 0:
		c.margin = 0
	}
	if !(c.decay > 0 && c.decay < 1) {
		c.decay = DefaultDecay
	}
	if c.minRatio > c.maxRatio {
		c.minRatio, c.maxRatio = DefaultMinRatio, DefaultMaxRatio
	}
	if c.maxModels <= 0 {
		c.maxModels = DefaultMaxModels
	}
	return c
}

// Base returns the counter the Calibrator scales.
func (c *Calibrator) Base() Counter { return c.base }

// Margin returns the safety margin in force (a fraction).
func (c *Calibrator) Margin() float64 { return c.margin }

// Observe records that a request the base counter estimated at estimated tokens was reported
// by the provider as reported prompt tokens (OpenAI prompt_tokens; Anthropic input_tokens plus
// cache_creation_input_tokens plus cache_read_input_tokens). Non-positive figures are ignored.
func (c *Calibrator) Observe(model string, estimated, reported int) {
	if estimated <= 0 || reported <= 0 {
		return
	}
	e, r := float64(estimated), float64(reported)
	ratio := math.Min(math.Max(r/e, c.minRatio), c.maxRatio)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.models[model]
	if st == nil {
		if len(c.models) >= c.maxModels {
			c.evictLocked()
		}
		st = &calState{}
		c.models[model] = st
	}
	st.rep = st.rep*c.decay + ratio*e
	st.est = st.est*c.decay + e
	st.n++
	c.clock++
	st.used = c.clock
}

// ObserveRequest estimates r with the base counter, records it against reported, and returns
// the estimate.
func (c *Calibrator) ObserveRequest(model string, r *chat.Request, reported int) int {
	e := c.base.Request(r).Total
	c.Observe(model, e, reported)
	return e
}

func (c *Calibrator) evictLocked() {
	var oldest string
	var t uint64 = math.MaxUint64
	for k, st := range c.models {
		if st.used < t {
			oldest, t = k, st.used
		}
	}
	delete(c.models, oldest)
}

// Ratio returns the learned ratio reported/estimated for model and the number of observations
// behind it; (1, 0) before the first.
func (c *Calibrator) Ratio(model string) (ratio float64, samples int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	st := c.models[model]
	if st == nil || st.est <= 0 {
		return 1, 0
	}
	return st.rep / st.est, st.n
}

// Forget drops what was learned for model.
func (c *Calibrator) Forget(model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.models, model)
}

// Counter returns the base counter scaled by model's learned ratio and the safety margin. The
// returned counter follows the calibration: each call reads the ratio in force. Before any
// observation it is the base counter plus the margin.
func (c *Calibrator) Counter(model string) Counter {
	return &calibrated{c: c, model: model}
}

func (c *Calibrator) factor(model string) float64 {
	r, _ := c.Ratio(model)
	return r * (1 + c.margin)
}

type calibrated struct {
	c     *Calibrator
	model string
}

func (k *calibrated) Name() string { return "calibrated(" + k.c.base.Name() + ")" }

func (k *calibrated) Text(s string) int { return scaleUp(k.c.base.Text(s), k.c.factor(k.model)) }

func (k *calibrated) Message(m *chat.Message) int {
	return scaleUp(k.c.base.Message(m), k.c.factor(k.model))
}

func (k *calibrated) Tools(tools []chat.Tool) int {
	return scaleUp(k.c.base.Tools(tools), k.c.factor(k.model))
}

// Request scales the base breakdown: Total is the base total times the factor, rounded up,
// and the regions are apportioned so that they add up to Total exactly (each is its scaled
// value rounded down or up).
func (k *calibrated) Request(r *chat.Request) Breakdown {
	b := k.c.base.Request(r)
	f := k.c.factor(k.model)
	parts := make([]int, 0, len(b.Messages)+3)
	parts = append(parts, b.System, b.Tools, b.Priming)
	parts = append(parts, b.Messages...)
	scaled := apportion(parts, f, scaleUp(b.Total, f))
	out := Breakdown{System: scaled[0], Tools: scaled[1], Priming: scaled[2], Messages: scaled[3:]}
	if b.Messages == nil {
		out.Messages = nil
	}
	out.Total = out.sum()
	return out
}

// scaleUp returns ceil(n*f), tolerant of floating-point noise, never below 0.
func scaleUp(n int, f float64) int {
	if n <= 0 {
		return 0
	}
	v := math.Ceil(float64(n)*f - 1e-9)
	if math.IsNaN(v) || v >= 1<<62 {
		return math.MaxInt
	}
	return max(0, int(v))
}

// apportion scales parts by f so that they sum to total: each part gets floor(part*f), and
// the remainder goes one by one to the parts with the largest fractional remainders.
func apportion(parts []int, f float64, total int) []int {
	out := make([]int, len(parts))
	type frac struct {
		i int
		r float64
	}
	fr := make([]frac, 0, len(parts))
	sum := 0
	for i, p := range parts {
		v := float64(p) * f
		fl := math.Floor(v + 1e-9)
		out[i] = int(fl)
		sum += out[i]
		if p > 0 {
			fr = append(fr, frac{i, v - fl})
		}
	}
	rem := total - sum
	if rem <= 0 || len(fr) == 0 {
		return out
	}
	sort.SliceStable(fr, func(a, b int) bool { return fr[a].r > fr[b].r })
	for j := 0; rem > 0; j = (j + 1) % len(fr) {
		out[fr[j].i]++
		rem--
	}
	return out
}
