package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The compaction tokens the proxy issues.
//
// A compaction the proxy answers gives the client an opaque value to send back (a Responses
// compaction item's encrypted_content, an Anthropic compaction block's encrypted_content):
//
//	ctxmgr1.<base64url(JSON claim)>.<base64url(HMAC-SHA256(key, JSON claim))>
//
// The claim names the session and the summary version the compaction made. The key is the
// store's own: 32 random bytes kept in the Store as the offloaded text "compaction-hmac" of the
// session "ctxmgr-keys" (a Store keeps the first text stored under a key, so instances that
// share a store agree on one key, and tokens outlive restarts). A value that does not verify
// (another provider's, altered, made with another store's key) is never trusted: it is
// forwarded as the client sent it, to an upstream that may own it.

const (
	tokenPrefix    = "ctxmgr1."
	keySession     = "ctxmgr-keys"
	keyName        = "compaction-hmac"
	keyRetention   = 100 * 365 * 24 * time.Hour
	tokenKeyLength = 32
)

// compactionClaim is what a token says.
type compactionClaim struct {
	Session string `json:"s"`
	Version int    `json:"v"`
}

// sealer makes and checks tokens with the store's key, loaded once.
type sealer struct {
	mu  sync.Mutex
	key []byte
}

// errNoKey: the store holds no usable key and none could be stored.
var errNoKey = errors.New("proxy: no compaction token key")

// key returns the store's token key, storing a new one if there is none.
func (s *Server) tokenKey(ctx context.Context) ([]byte, error) {
	s.seal.mu.Lock()
	defer s.seal.mu.Unlock()
	if s.seal.key != nil {
		return s.seal.key, nil
	}
	st := s.cfg.Store
	text, _, err := st.ReadOffload(ctx, keySession, keyName, 1, 0)
	if err != nil {
		var fresh [tokenKeyLength]byte
		_, _ = rand.Read(fresh[:])
		if _, err := st.Offload(ctx, keySession, keyName, hex.EncodeToString(fresh[:]), time.Now().Add(keyRetention)); err != nil {
			return nil, fmt.Errorf("%w: %w", errNoKey, err)
		}
		// Another instance may have stored its key first: the stored one is the key.
		if text, _, err = st.ReadOffload(ctx, keySession, keyName, 1, 0); err != nil {
			return nil, fmt.Errorf("%w: %w", errNoKey, err)
		}
	}
	key, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil || len(key) != tokenKeyLength {
		return nil, fmt.Errorf("%w: the stored key is malformed", errNoKey)
	}
	s.seal.key = key
	return key, nil
}

// sealToken returns the token of c.
func (s *Server) sealToken(ctx context.Context, c compactionClaim) (string, error) {
	key, err := s.tokenKey(ctx)
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString(payload) + "." + enc.EncodeToString(tokenMAC(key, payload)), nil
}

// openToken returns the claim of a token the proxy issued; ok is false for anything else.
func (s *Server) openToken(ctx context.Context, tok string) (c compactionClaim, ok bool) {
	rest, found := strings.CutPrefix(tok, tokenPrefix)
	if !found {
		return c, false
	}
	p64, m64, found := strings.Cut(rest, ".")
	if !found {
		return c, false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	mac, err2 := enc.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return c, false
	}
	key, err := s.tokenKey(ctx)
	if err != nil || !hmac.Equal(mac, tokenMAC(key, payload)) {
		return c, false
	}
	if json.Unmarshal(payload, &c) != nil || c.Session == "" || c.Version < 0 {
		return compactionClaim{}, false
	}
	return c, true
}

func tokenMAC(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(payload)
	return h.Sum(nil)
}

// expandToken returns the text that stands for a verified claim in what is forwarded: the
// summary it names, with where the summarized messages are archived.
func (s *Server) expandToken(ctx context.Context, c compactionClaim) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s Summary of the earlier conversation (session %s", replyPrefix, c.Session)
	if c.Version == 0 {
		b.WriteString("): nothing had been summarized.")
		return b.String(), nil
	}
	sums, err := s.cfg.Store.Summaries(ctx, c.Session)
	if err != nil {
		return "", fmt.Errorf("proxy: reading the summary a compaction names: %w", err)
	}
	for _, sum := range sums {
		if sum.Version == c.Version {
			fmt.Fprintf(&b, ", summary v%d; the summarized messages are archived verbatim", c.Version)
			if !s.cfg.DisableReadTool {
				b.WriteString("; the ctxmgr_read tool reads them")
			}
			b.WriteString("):\n\n")
			b.WriteString(sum.Text)
			return b.String(), nil
		}
	}
	return "", fmt.Errorf("proxy: summary v%d of session %s: not in the store", c.Version, c.Session)
}
