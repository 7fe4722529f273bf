package replay

import (
	"fmt"
	"strconv"
	"strings"

	ctxmgr "github.com/ctxmgr/ctxmgr"
)

// Sweep strategies: the default preset with its knob between cost and recall,
// ctxmgr.Config.CostMaskKeep (how many of the newest tool results the cost model never masks),
// set to another value. "default@20" masks beyond the 20 newest when it pays; "default@off"
// never masks below the threshold, as the preset itself does. They are drawn with every
// preset on the report's cost/recall chart, which shows where the preset's own setting sits
// on the frontier.

// DefaultSweep are the knob values the report sweeps (0: off, the preset's own setting, is
// not among them).
var DefaultSweep = []int{10, 20, 30, 60}

// SweepStrategy names the default preset with CostMaskKeep n (0: off).
func SweepStrategy(n int) string {
	if n <= 0 {
		return ctxmgr.PresetDefault + "@off"
	}
	return fmt.Sprintf("%s@%d", ctxmgr.PresetDefault, n)
}

// parseSweep returns the knob value of a sweep strategy name.
func parseSweep(name string) (int, bool) {
	v, ok := strings.CutPrefix(name, ctxmgr.PresetDefault+"@")
	if !ok {
		return 0, false
	}
	if v == "off" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// knownStrategy reports whether name is raw, a preset or a sweep strategy.
func knownStrategy(name string) bool {
	_, sweep := parseSweep(name)
	return name == StrategyRaw || ctxmgr.IsPreset(name) || sweep
}

// strategyConfig is the configuration of a preset or a sweep strategy.
func strategyConfig(name string, window, maxOutput int) (ctxmgr.Config, error) {
	if n, ok := parseSweep(name); ok {
		cfg, err := ctxmgr.Preset(ctxmgr.PresetDefault, window, maxOutput)
		cfg.CostMaskKeep = n
		return cfg, err
	}
	return ctxmgr.Preset(name, window, maxOutput)
}
