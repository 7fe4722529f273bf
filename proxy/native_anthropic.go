package proxy

import (
	"context"
	"net/http"
)

// anthropicNative is the Anthropic side of a nativeAction.
type anthropicNative struct{}

// nativeAnthropic is nativeRequest for the Anthropic Messages API.
func (s *Server) nativeAnthropic(ctx context.Context, r *http.Request, base string, body []byte) ([]byte, *nativeAction, error) {
	return body, nil, nil
}

// nativeBetas returns the anthropic-beta values that only the providers' context management
// needs ("" when there are none).
func nativeBetas(h http.Header) string { return "" }

// writeAnthropicCompaction answers an Anthropic compaction with the proxy's summary and token.
func writeAnthropicCompaction(w http.ResponseWriter, act *nativeAction, model string, stream bool, token, summary string) {
}
