package tokens

import (
	"math"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

// RatioOptions configures a fixed-ratio estimator: the token estimates the seed systems use
// (QwenPaw: UTF-8 bytes / 4; Picoclaw: characters * 2/5 and 256 per media item; BaseAgent and
// CowAgent: characters / 4). They exist so that the seed presets reproduce those systems
// faithfully, errors included; ctxmgr's own default counts exactly.
type RatioOptions struct {
	// Name is what Counter.Name returns (default "ratio").
	Name string
	// PerToken is how many units make a token (default 4).
	PerToken float64
	// Runes counts characters (runes) instead of UTF-8 bytes.
	Runes bool
	// MediaTokens is the flat cost of an image or file part (default 1000).
	MediaTokens int
}

// NewRatio returns a counter that estimates tokens as units/PerToken, rounded up, with the
// same message framing as the other counters.
func NewRatio(opts RatioOptions) Counter {
	if opts.PerToken <= 0 || math.IsInf(opts.PerToken, 0) || math.IsNaN(opts.PerToken) {
		opts.PerToken = 4
	}
	if opts.Name == "" {
		opts.Name = "ratio"
	}
	r := &ratio{opts: opts}
	fo := Options{Images: ImagesFlat, UnknownImageTokens: opts.MediaTokens, UnknownFileTokens: opts.MediaTokens}
	r.f = framer{text: r.Text, opts: fo}
	return r
}

type ratio struct {
	opts RatioOptions
	f    framer
}

func (r *ratio) Name() string                      { return r.opts.Name }
func (r *ratio) Message(m *chat.Message) int       { return r.f.message(m) }
func (r *ratio) Tools(tools []chat.Tool) int       { return r.f.tools(tools) }
func (r *ratio) Request(q *chat.Request) Breakdown { return request(r, q) }

func (r *ratio) Text(s string) int {
	n := len(s)
	if r.opts.Runes {
		n = utf8.RuneCountInString(s)
	}
	if n == 0 {
		return 0
	}
	return int(math.Ceil(float64(n) / r.opts.PerToken))
}
