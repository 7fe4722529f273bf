package fakeupstream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// Thinking blocks. The fake signs the thinking it issues with an HMAC-SHA256 under its key
// (Options.SigningKey, or a random per-Server key), so that it can refuse, as the real API
// does, a thinking block it did not issue or whose text was altered. A redacted_thinking
// block's data carries its payload and the payload's HMAC.

const sigPrefix = "fakesig1:"

func (s *Server) mac(kind, text string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(text))
	return h.Sum(nil)
}

// signThinking returns the signature the fake issues for a thinking text.
func (s *Server) signThinking(text string) string {
	return base64.StdEncoding.EncodeToString(append([]byte(sigPrefix), s.mac("thinking", text)...))
}

// verifyThinking reports whether sig is the signature the fake issued for text.
func (s *Server) verifyThinking(text, sig string) bool {
	b, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(b) != len(sigPrefix)+sha256.Size || string(b[:len(sigPrefix)]) != sigPrefix {
		return false
	}
	return hmac.Equal(b[len(sigPrefix):], s.mac("thinking", text))
}

// redactedData returns the data of a redacted_thinking block the fake issues for a payload.
func (s *Server) redactedData(payload string) string {
	return base64.StdEncoding.EncodeToString(append([]byte(payload), s.mac("redacted", payload)...))
}

// verifyRedacted reports whether data is a redacted_thinking payload the fake issued, unaltered.
func (s *Server) verifyRedacted(data string) bool {
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil || len(b) < sha256.Size {
		return false
	}
	n := len(b) - sha256.Size
	return hmac.Equal(b[n:], s.mac("redacted", string(b[:n])))
}
