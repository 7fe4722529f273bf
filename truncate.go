package ctxmgr

import (
	"context"
	"fmt"
	"slices"

	"github.com/ctxmgr/ctxmgr/chat"
)

// shrinkToFit runs the forced steps until the request fits: every rewrite regardless of its
// saving, a summary that keeps only the active turn, middle-out truncation, dropping older
// reasoning. Then a *NoFitError if it still does not fit.
func (s *Session) shrinkToFit(ctx context.Context, rep *Report) error {
	if s.plan().Fits {
		return nil
	}
	if err := s.rewrite(ctx, true, "over budget", rep); err != nil {
		return err
	}
	if !s.plan().Fits && !s.m.cfg.DisableSummary {
		if err := s.summarize(ctx, s.minCut, "", "over budget: keep only the latest iteration", rep); err != nil {
			return err
		}
	}
	for round := 0; round < 4 && !s.plan().Fits; round++ {
		if err := s.truncate(ctx, rep); err != nil {
			return err
		}
	}
	if !s.plan().Fits {
		s.dropReasoning(rep)
	}
	if p := s.plan(); !p.Fits {
		latest := 0
		for i := len(s.entries) - 1; i >= s.start; i-- {
			if s.entries[i].orig.Role == chat.RoleUser {
				latest = s.entries[i].tokens
				break
			}
		}
		return &NoFitError{Window: p.Window, MaxOutput: p.MaxOutput, Margin: p.Margin, System: p.System,
			Tools: p.Tools, Summary: p.Summary, History: p.History, LatestUser: latest}
	}
	return nil
}

// truncate cuts the largest live tool results middle-out so that the request fits, by water
// filling: every result above a common cap is cut to it.
func (s *Session) truncate(ctx context.Context, rep *Report) error {
	p := s.plan()
	need := -p.Free
	if need <= 0 {
		return nil
	}
	const overhead = 80 // tokens of the reference line
	var idx []int
	for _, i := range s.results {
		if i >= s.start && !s.entries[i].exempt && s.entries[i].tokens > 2*overhead {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	freed := func(capTok int) int {
		f := 0
		for _, i := range idx {
			if t := s.entries[i].tokens; t > capTok+overhead {
				f += t - capTok - overhead
			}
		}
		return f
	}
	lo, hi := 0, 0
	for _, i := range idx {
		hi = max(hi, s.entries[i].tokens)
	}
	if freed(lo) < need {
		lo = 0 // cannot free enough from results alone; cut them all to the minimum
	} else {
		for lo < hi { // largest cap that frees enough
			mid := (lo + hi + 1) / 2
			if freed(mid) >= need {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
	}
	capTok := lo
	if s.m.cfg.seed.TruncateTokens > 0 {
		capTok = min(capTok, s.m.cfg.seed.TruncateTokens)
	}
	before := p.Input
	n := 0
	for _, i := range idx {
		e := &s.entries[i]
		if e.tokens <= capTok+overhead {
			continue
		}
		off, err := s.offload(ctx, i, e)
		if err != nil {
			return err
		}
		e.off = &off
		bytesPerTok := float64(max(1, textBytes(&e.view))) / float64(max(1, e.tokens))
		keep := max(256, int(float64(capTok)*bytesPerTok))
		s.setView(i, snippetView(&e.orig, off, keep), viewTruncated)
		n++
	}
	if n > 0 {
		s.note(rep, Event{Step: StepTruncate, Reason: fmt.Sprintf("one huge turn: %d tokens over budget; tool results cut middle-out to ~%d tokens", need, capTok), Before: before, After: s.plan().Input, Messages: n})
	}
	return nil
}

// dropReasoning removes reasoning parts from live assistant messages other than the latest
// one (a signed thinking block cannot be shortened, only left out).
func (s *Session) dropReasoning(rep *Report) {
	lastAsst := -1
	for i := len(s.entries) - 1; i >= s.start; i-- {
		if s.entries[i].orig.Role == chat.RoleAssistant {
			lastAsst = i
			break
		}
	}
	before := s.plan().Input
	n := 0
	for i := s.start; i < len(s.entries); i++ {
		e := &s.entries[i]
		if i == lastAsst || e.orig.Role != chat.RoleAssistant {
			continue
		}
		has := slices.ContainsFunc(e.view.Content, func(p chat.Part) bool { return p.Type == chat.PartReasoning })
		if !has {
			continue
		}
		v := e.view
		v.Content = slices.DeleteFunc(slices.Clone(v.Content), func(p chat.Part) bool { return p.Type == chat.PartReasoning })
		if len(v.Content) == 0 && len(v.ToolCalls) == 0 {
			v.Content = []chat.Part{{Type: chat.PartText, Text: "[reasoning omitted]"}}
		}
		s.setView(i, v, viewNoReasoning)
		n++
	}
	if n > 0 {
		s.note(rep, Event{Step: StepTruncate, Reason: "older reasoning dropped", Before: before, After: s.plan().Input, Messages: n})
	}
}
