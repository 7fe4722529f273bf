package ctxmgr

import (
	"fmt"
	"slices"
	"time"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// Preset names. "default" is ctxmgr's own tuning; the five seed presets reproduce the documented
// defaults of the systems ctxmgr learns from (CoPaw, QwenPaw, Picoclaw, CowAgent, BaseAgent) on
// ctxmgr's mechanism, so
// that they can be compared side by side (ctxmgr replay); "masking" is the published
// observation-masking baseline (keep the last 10 tool outputs).
const (
	PresetDefault   = "default"
	PresetMasking   = "masking"
	PresetCoPaw     = "copaw"
	PresetQwenPaw   = "qwenpaw"
	PresetPicoclaw  = "picoclaw"
	PresetCowAgent  = "cowagent"
	PresetBaseAgent = "baseagent"
)

// Presets lists the preset names.
func Presets() []string {
	return []string{PresetDefault, PresetMasking, PresetCoPaw, PresetQwenPaw, PresetPicoclaw, PresetCowAgent, PresetBaseAgent}
}

// Preset returns the configuration of a preset for a window of `window` tokens with
// `maxOutput` tokens of reply. It sets the values the preset chooses and leaves every other
// field zero, so that it means its documented default, as in any Config (New fills them;
// WithDefaults shows them). Prices, Store, Summarizer, Logger, Now and OnEvent are left for
// the caller; the token Counter is part of the preset where the seed system estimates tokens
// its own way (nil means ctxmgr's exact default).
//
// The seed presets also carry rules of the systems they reproduce that no Config field sets
// (count triggers, keep rules, turn-only cuts, masking on every call, BaseAgent's protection
// of the newest tool tokens, the ordinary cap for requested reads): selecting the preset by
// name is the only way to have them, and a copy of its Config keeps them.
func Preset(name string, window, maxOutput int) (Config, error) {
	w := budget.Window{Window: window, MaxOutput: maxOutput}
	switch name {
	case PresetDefault:
		// Ours: exact tokens; tool results above 10,000 bytes (about 2,500 tokens) capped at
		// ingestion, once, so the prefix never changes because of them, keeping head, tail
		// and the notable lines between; results the agent asked for as file reads or
		// searches (Read with offset/limit, read_file, view, cat, sed -n, Grep) keep up to
		// 40,000 bytes while recent, as far as they fit under the threshold beside the
		// conversation's own messages.
		//
		// Every rewrite of history already sent is a prompt-cache miss, and every lossy one
		// removes what the agent may need again, so each is made only when the cost model
		// says it pays, read-back included, in batches: results a later one shows again
		// become references to it (lossless); results older than the 2 newest are cut to
		// 3,000 bytes keeping the lines that hold identifiers in play, or masked to a stub,
		// whichever is worth more once the expected read-back is priced by what this
		// session's agent has shown of its habits (reuse.go): an agent that pages through a
		// document and quotes at the end keeps its pages, one that never looks back at a
		// command's output lets it go. Without window pressure a lossy batch must save twice
		// what it is expected to cost.
		//
		// Over the threshold (95%) compaction runs in large batches: masking beyond the 10
		// newest when it frees 5% of the window, then, if still over, masking all but the 2
		// newest, then all but the newest (the conversation's own messages stay verbatim),
		// and only then summaries down to a 20% reserve, cut between tool iterations when one
		// turn is the whole run. The summary may use 6% of the window (at least 1000
		// tokens): it is what remains of everything evicted, so it is worth more than its
		// share of a call. The threshold is what must fit, not when to save: saving is the
		// cost model's call, at any size. The 5% left, beside the 2% safety margin, absorbs
		// the error of a calibrated estimate (models whose tokenizer is not public) and lets
		// a background summary be ready before it is needed.
		w.Threshold, w.Reserve = 0.95, 0.20
		return Config{
			Budget:        w,
			ToolResultCap: 10000, RequestedReadCap: 4 * 10000,
			Supersede: true, AgeOut: true, OldToolResultCap: 3000, RecentToolResults: 2, CostMaskKeep: 2,
			MaskKeep: 10, MaskBeforeSummary: true,
			SummaryTokens: max(min(1000, window/4), window*6/100),
		}, nil
	case PresetMasking:
		// Lindenbauer et al. 2025: keep the last 10 tool outputs, mask older ones, on every
		// call, whatever that frees; no summaries.
		return Config{
			Budget: w, DisableOffload: true, MaskKeep: 10, DisableSummary: true,
			seed: seedRules{RollingRewrite: true, NoMaskMinSaving: true, PlainReads: true},
		}, nil
	case PresetCoPaw:
		// Trigger 0.75 x max_input_length, reserve 0.1 x window, tool-result compaction off,
		// structured incremental summary, tokenizer counts.
		w.Threshold, w.Reserve = 0.75, 0.10
		return Config{
			Budget: w, DisableOffload: true, DisableMasking: true,
			seed: seedRules{TurnCuts: true, PlainReads: true},
		}, nil
	case PresetQwenPaw:
		// Trigger 0.8, reserve 0.1; tool results: the 2 most recent keep 50000 bytes, older
		// ones are cut to 3000 bytes on every call, full text offloaded to files kept 5 days;
		// tokens are UTF-8 bytes / 4.
		w.Threshold, w.Reserve = 0.80, 0.10
		return Config{
			Budget:        w,
			ToolResultCap: 50000, OldToolResultCap: 3000, RecentToolResults: 2, OffloadRetention: 5 * 24 * time.Hour,
			DisableMasking: true,
			Counter:        tokens.NewRatio(tokens.RatioOptions{Name: "bytes/4", PerToken: 4}),
			seed:           seedRules{TurnCuts: true, RollingRewrite: true, NoMaskMinSaving: true, PlainReads: true},
		}, nil
	case PresetPicoclaw:
		// Summarize when the history has more than 20 messages or passes 75% of the window;
		// keep the last 4 messages, snapped to a turn; no tool-result handling; tokens are
		// characters * 2/5 plus 256 per media item.
		w.Threshold = 0.75
		return Config{
			Budget: w, DisableOffload: true, DisableMasking: true,
			Counter: tokens.NewRatio(tokens.RatioOptions{Name: "chars*2/5", PerToken: 2.5, Runes: true, MediaTokens: 256}),
			seed:    seedRules{TurnCuts: true, MaxMessages: 20, KeepMessages: 4, PlainReads: true},
		}, nil
	case PresetCowAgent:
		// Summarize past 20 turns or 50000 tokens, keeping the newest half of the turns;
		// historical tool results above 20000 characters are cut head+tail on every call;
		// tokens estimated as characters / 4.
		w.Threshold = 0.95
		return Config{
			Budget: w, DisableOffload: true, DisableMasking: true,
			OldToolResultCap: 20000, RecentToolResults: 2,
			Counter: tokens.NewRatio(tokens.RatioOptions{Name: "chars/4", PerToken: 4, Runes: true}),
			seed: seedRules{TurnCuts: true, MaxTurns: 20, TriggerTokens: min(window, 50000+maxOutput), KeepTurnFraction: 0.5,
				RollingRewrite: true, NoMaskMinSaving: true, PlainReads: true},
		}, nil
	case PresetBaseAgent:
		// Compact at 85% of (window - max output) of input; keep the last 2 user turns;
		// prune old tool outputs beyond the newest 40000 tool tokens (no count of newest
		// results is protected: those tokens alone are) when that frees at least 20000
		// tokens; tool outputs capped middle-out at 2500 tokens; tokens are chars / 4.
		input := 0.85 * float64(window-maxOutput)
		w.Threshold = min(1, (input+float64(maxOutput))/float64(window))
		return Config{
			Budget: w, ToolResultCap: 2500 * 4, MaskMinSaving: 20000,
			Counter: tokens.NewRatio(tokens.RatioOptions{Name: "chars/4", PerToken: 4, Runes: true}),
			seed: seedRules{TurnCuts: true, KeepUserTurns: 2, MaskProtectTokens: 40000, RollingRewrite: true,
				TruncateTokens: 2500, PlainReads: true},
		}, nil
	}
	return Config{}, fmt.Errorf("%w: unknown preset %q (known: %v)", ErrInvalidConfig, name, Presets())
}

// IsPreset reports whether name is a preset.
func IsPreset(name string) bool { return slices.Contains(Presets(), name) }
