package wire

import "github.com/ctxmgr/ctxmgr/internal/encodecache"

// The encoders that reuse what a Cache holds are reached through package encodecache (the
// proxy's per-session encode cache); EncodeOpenAI and the others are the same encoders without
// a cache.
func init() {
	encodecache.Register(encodecache.Encoders{
		OpenAI:    appendOpenAI,
		Anthropic: appendAnthropic,
		Responses: appendResponses,
		Gemini:    appendGemini,
	})
}
