package ctxmgr

import (
	"context"
	"fmt"

	"github.com/ctxmgr/ctxmgr/provider"
)

// Recover handles a provider error. When it is a context overflow (provider.IsOverflowError),
// it settles on a smaller window for the session and returns a new request compacted to fit
// it; after Config.MaxRecoveries attempts without a new message it returns
// ErrRecoveryExhausted. Any other error is returned as is.
//
// The new window comes from what the provider said (provider.ErrorLimits): its maximum, and
// its count of the request, whose ratio to ours is how much more it counts. When it did not
// say both, or when they say the refused request should have fit, the window is made smaller
// than the request it refused: its input part by 10% on the first attempt, by half on later
// ones. The session keeps the smaller window from then on (the Store keeps
// it across restarts); thresholds, reserve and the summary size keep their ratios to it.
// The reply budget shrinks with it: send the returned Report.MaxOutput as the request's
// max_tokens, on the retry and on every later request (see Report.MaxOutput).
func (s *Session) Recover(ctx context.Context, providerErr error) (Prepared, error) {
	if !provider.IsOverflowError(providerErr) {
		return Prepared{}, providerErr
	}
	lim := provider.ErrorLimits(providerErr)
	s.mu.Lock()
	s.recoveries++
	n := s.recoveries
	if n > s.m.cfg.MaxRecoveries {
		s.mu.Unlock()
		return Prepared{}, fmt.Errorf("%w after %d attempts: %w", ErrRecoveryExhausted, n-1, providerErr)
	}
	w := s.window()
	refused := s.plan().Input + w.MaxOutput // the request the provider refused, by our count
	win := min(w.Window, refused)
	reason := fmt.Sprintf("provider overflow, attempt %d", n)
	if lim.Max > 0 {
		// The provider's maximum in our tokens: its input part scaled by how much more it
		// counts, when it says what it counted, with 2% to spare; the reply keeps the reserve
		// it will have in that window.
		q := 1.0
		if sent := s.plan().Input; lim.Input > 0 && sent > 0 {
			q = min(max(float64(lim.Input)/float64(sent), 1), 4)
		}
		r := s.replyReserve(lim.Max)
		win = min(win, int(float64(lim.Max-r)/q*0.98)+r)
		reason += fmt.Sprintf(": the provider's maximum is %d tokens", lim.Max)
		if lim.Input > 0 {
			reason += fmt.Sprintf(" and it counted %d input tokens where we count %d", lim.Input, s.plan().Input)
		}
	}
	if lim.Max == 0 || lim.Input == 0 || win >= refused {
		// Without both numbers, or when they say the refused request should have fit:
		// smaller than what was refused, by 10% on a first attempt (counts that differ a
		// little), by half after that (a window far smaller than configured).
		f := 0.9
		if n > 1 {
			f = 0.5
		}
		win = min(win, int(float64(refused)*f))
	}
	if win-s.replyReserve(win) <= 0 {
		s.mu.Unlock()
		return Prepared{}, fmt.Errorf("%w: %s; a window of %d tokens leaves no room for input: %w",
			ErrRecoveryExhausted, reason, win, providerErr)
	}
	s.windowLimit = win
	s.epoch++ // the new window is state to persist
	s.mu.Unlock()
	p, err := s.prepare(ctx, true)
	if err != nil {
		return p, err
	}
	ev := Event{Step: StepRecover, Reason: fmt.Sprintf("%s: window now %d tokens", reason, win),
		Before: p.Report.InputBefore, After: p.Report.InputAfter}
	p.Report.Steps = append(p.Report.Steps, ev)
	s.mu.Lock()
	s.m.emit(s, ev)
	s.mu.Unlock()
	s.deliver(ctx)
	return p, nil
}
