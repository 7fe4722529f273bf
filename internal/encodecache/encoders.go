package encodecache

import (
	"errors"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Encoders are package wire's encoders, which encode with a Cache. Each appends the body of r
// to dst and returns the extended buffer; the body is the one wire's uncached encoder of the
// format gives (for Anthropic, of r with subs substituted; see Substituted). A nil Cache
// encodes everything.
type Encoders struct {
	OpenAI    func(dst []byte, r *chat.Request, c *Cache) ([]byte, error)
	Anthropic func(dst []byte, r *chat.Request, c *Cache, subs map[int]chat.Message) ([]byte, error)
	Responses func(dst []byte, r *chat.Request, c *Cache) ([]byte, error)
	Gemini    func(dst []byte, r *chat.Request, c *Cache) ([]byte, error)
}

// encoders are set once, by package wire's initialization, before any call.
var encoders Encoders

// Register sets the encoders. Package wire calls it when it is initialized; nothing else
// does.
func Register(e Encoders) { encoders = e }

// errUnregistered: package wire is not linked in (a program that encodes imports it).
var errUnregistered = errors.New("encodecache: no encoder registered (package wire is not imported)")

// AppendOpenAI appends the OpenAI chat-completions body of r (wire.EncodeOpenAI's) to dst,
// taking the messages c rendered in its last call from c.
func AppendOpenAI(dst []byte, r *chat.Request, c *Cache) ([]byte, error) {
	if encoders.OpenAI == nil {
		return nil, errUnregistered
	}
	return encoders.OpenAI(dst, r, c)
}

// AppendAnthropic appends the Anthropic messages body (wire.EncodeAnthropic's) of r with the
// message at each position that is a key of subs encoded as its value instead: a caller that
// changes a few messages of a long request (a proxy moving cache breakpoints) passes the rest
// as they are, in the array it passed the last time. Then the groups of messages the two
// calls share, that no substitute touches now or touched then, are reused by position
// without a look at their messages (the array is the same and never modified: the contract
// of Cache), and the call costs what its new and changed messages cost. subs must not be
// modified after the call (c keeps it until the next).
func AppendAnthropic(dst []byte, r *chat.Request, c *Cache, subs map[int]chat.Message) ([]byte, error) {
	if encoders.Anthropic == nil {
		return nil, errUnregistered
	}
	return encoders.Anthropic(dst, r, c, subs)
}

// AppendResponses appends the OpenAI Responses body of r (wire.EncodeResponses's) to dst,
// taking the input items of the messages c rendered in its last call from c.
func AppendResponses(dst []byte, r *chat.Request, c *Cache) ([]byte, error) {
	if encoders.Responses == nil {
		return nil, errUnregistered
	}
	return encoders.Responses(dst, r, c)
}

// AppendGemini appends the Gemini generateContent body of r (wire.EncodeGemini's) to dst,
// taking the contents of the messages c rendered in its last call from c.
func AppendGemini(dst []byte, r *chat.Request, c *Cache) ([]byte, error) {
	if encoders.Gemini == nil {
		return nil, errUnregistered
	}
	return encoders.Gemini(dst, r, c)
}
