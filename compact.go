package ctxmgr

import (
	"context"
	"math"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
)

// compactOverTrigger is Prepare's compaction step. Over the compaction trigger (overTrigger),
// or with force: the threshold rewrite of old tool results (rewrite; a seed preset with a
// rolling rewrite made it already), then, while still over, masking before a summary
// (Config.MaskBeforeSummary), then, while still over (or with force), a summary of all but
// the kept part (keepCut). Under the trigger, with Config.Background, a summary may start in
// the background at the soft threshold.
func (s *Session) compactOverTrigger(ctx context.Context, force bool, rep *Report) error {
	cfg := &s.m.cfg
	if !force && !s.overTrigger() {
		if cfg.Background && !cfg.DisableSummary && s.plan().OverSoft {
			return s.startBackground(ctx)
		}
		return nil
	}
	if !cfg.seed.RollingRewrite {
		if err := s.rewrite(ctx, force, "over the compaction threshold", rep); err != nil {
			return err
		}
	}
	if cfg.MaskBeforeSummary && s.overTrigger() {
		if err := s.maskBeforeSummary(ctx, rep); err != nil {
			return err
		}
	}
	if (force || s.overTrigger()) && !cfg.DisableSummary {
		return s.summarize(ctx, s.keepCut, "", "over the compaction threshold", rep)
	}
	return nil
}

// overTrigger reports whether compaction should run: over the threshold by the one budget
// formula, or over a count trigger of a seed preset.
func (s *Session) overTrigger() bool {
	cfg := &s.m.cfg
	p := s.plan()
	if cfg.seed.TriggerTokens > 0 {
		if p.Input+p.MaxOutput > cfg.seed.TriggerTokens {
			return true
		}
	} else if p.OverThreshold {
		return true
	}
	n := len(s.entries) - s.start
	if cfg.seed.MaxMessages > 0 && n > cfg.seed.MaxMessages {
		return true
	}
	if cfg.seed.MaxTurns > 0 && len(turns.Boundaries(s.live())) > cfg.seed.MaxTurns {
		return true
	}
	return p.OverBudget
}

// keepCut is the history position compaction may evict up to: the keep rules of the config
// (the reserve by default), snapped backwards to a safe cut (see snapCut). It returns s.start
// when nothing can be evicted.
func (s *Session) keepCut() int {
	cfg := &s.m.cfg
	live := s.live()
	n := len(live)
	if n == 0 {
		return s.start
	}
	target := n
	counted := cfg.seed.KeepMessages > 0 || cfg.seed.KeepUserTurns > 0 || cfg.seed.KeepTurnFraction > 0
	if !counted {
		keep := s.window().ReserveTokens()
		sum := 0
		for i := n - 1; i >= 0; i-- {
			sum += s.entries[s.start+i].tokens
			if sum > keep {
				target = i + 1
				break
			}
			target = i
		}
	}
	b := turns.Boundaries(live)
	if cfg.seed.KeepMessages > 0 {
		target = min(target, max(0, n-cfg.seed.KeepMessages))
	}
	if cfg.seed.KeepUserTurns > 0 {
		if len(b) >= cfg.seed.KeepUserTurns {
			target = min(target, b[len(b)-cfg.seed.KeepUserTurns])
		} else {
			target = 0
		}
	}
	if cfg.seed.KeepTurnFraction > 0 && len(b) > 0 {
		keepTurns := int(math.Ceil(cfg.seed.KeepTurnFraction * float64(len(b))))
		target = min(target, b[len(b)-max(1, keepTurns)])
	}
	return s.snapCut(live, target)
}

// minCut evicts all but the last safe part of the live history: the latest iteration (an
// assistant message and its results) or the latest user message.
func (s *Session) minCut() int {
	live := s.live()
	return s.snapCut(live, len(live)-1)
}

// snapCut snaps a live-relative target backwards to the nearest safe cut and returns it as a
// history position (s.start when there is none): a turn boundary, or, unless the seed rule
// TurnCuts, the start of a tool iteration no call crosses (turns.SafeCut with Iterations), so
// that one long turn (a coding agent's whole run) can be cut too. The latest user message is
// never evicted: a cut past it pins it (see Session.pinned).
func (s *Session) snapCut(live []chat.Message, target int) int {
	target = min(target, len(live)-1)
	if target <= 0 {
		return s.start
	}
	opts := turns.CutOptions{Search: turns.Backward, Iterations: !s.m.cfg.seed.TurnCuts}
	if cut, ok := turns.SafeCut(live, target, opts); ok && cut > 0 {
		return s.start + cut
	}
	return s.start
}
