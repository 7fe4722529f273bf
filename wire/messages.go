package wire

import (
	"encoding/json"
	"fmt"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Single messages, for callers that keep their own history: a message array of a format (what
// its requests carry under "messages", "input" or "contents") decoded to chat messages and
// encoded back, by the same codecs as whole requests, so nothing of a message is lost (unknown
// fields, Anthropic thinking signatures, Responses reasoning items, Gemini thought signatures).

// DecodeMessages decodes raw, a JSON array of messages of format f (OpenAI or Anthropic
// messages, Responses input items, Gemini contents), as Decode decodes them inside a request.
// One wire message may become several chat messages (an Anthropic user message with tool
// results: one per result) and several wire items one (a Responses reasoning item, message and
// function calls of one turn), as in a request.
func DecodeMessages(f Format, raw json.RawMessage) ([]chat.Message, error) {
	body, err := json.Marshal(map[string]json.RawMessage{messagesKey(f): raw})
	if err != nil {
		return nil, fmt.Errorf("wire: %s messages: %w", f, err)
	}
	r, err := Decode(f, body)
	if err != nil {
		return nil, err
	}
	return r.Messages, nil
}

// EncodeMessages encodes msgs as the JSON array of messages of format f that Encode would put
// in a request; DecodeMessages reads it back to the same messages. A system message has no
// place in an Anthropic or Gemini message array (their requests carry it beside the messages):
// it is an error there.
func EncodeMessages(f Format, msgs []chat.Message) (json.RawMessage, error) {
	if f == Anthropic || f == Gemini {
		for i := range msgs {
			if msgs[i].Role == chat.RoleSystem {
				return nil, fmt.Errorf("wire: %s message %d: a system message is not part of the message array", f, i)
			}
		}
	}
	body, err := Encode(f, &chat.Request{Messages: msgs})
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("wire: %s messages: %w", f, err)
	}
	out, ok := top[messagesKey(f)]
	if !ok {
		return json.RawMessage("[]"), nil
	}
	return out, nil
}

// DecodeAnswer decodes the answer of a complete (non-streamed) response body of format f as
// the history holds it, losslessly, by the request codec (see DecodeMessages): the assistant
// message of an OpenAI choice or of Anthropic's content, the output items of a Responses
// object, the content of a Gemini candidate (of every chunk, for a stream's array). Appended
// to a history and sent again, it is what the provider wrote, every field kept: Anthropic
// thinking and its signature, Responses reasoning items, Gemini thought signatures, unknown
// fields. Usually one message; none for an answer without content. A body that is not a
// response of the format, or whose answer the request codec refuses, is an error wrapping
// ErrMalformedResponse. (DecodeResponse reads what a response says; DecodeAnswer what it is.)
func DecodeAnswer(f Format, body []byte) ([]chat.Message, error) {
	var raw json.RawMessage
	switch f {
	case OpenAI:
		var r struct {
			Choices []struct {
				Message json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) == 0 {
			return nil, malformedResponse("no choice")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.Choices[0].Message, &m); err != nil {
			return nil, malformedResponse("message: %v", err)
		}
		if _, ok := m["role"]; !ok {
			// An answer's message is the assistant's, whether or not it says so.
			m["role"] = json.RawMessage(`"assistant"`)
			b, err := json.Marshal(m)
			if err != nil {
				return nil, malformedResponse("message: %v", err)
			}
			r.Choices[0].Message = b
		}
		raw = append(append(json.RawMessage("["), r.Choices[0].Message...), ']')
	case Anthropic:
		var r struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, malformedResponse("%v", err)
		}
		if len(r.Content) == 0 || string(r.Content) == "null" {
			return nil, nil
		}
		m, err := json.Marshal(map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": r.Content})
		if err != nil {
			return nil, malformedResponse("%v", err)
		}
		raw = append(append(json.RawMessage("["), m...), ']')
	case Responses:
		var r struct {
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, malformedResponse("%v", err)
		}
		raw = r.Output
	case Gemini:
		// One response object, or the array of a stream's chunks: the parts of their first
		// candidates, in order, make the answer.
		type chunk struct {
			Candidates []struct {
				Content struct {
					Role  string            `json:"role"`
					Parts []json.RawMessage `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		chunks, err := geminiChunks[chunk](body)
		if err != nil {
			return nil, err
		}
		role, parts := "model", []json.RawMessage{}
		for _, c := range chunks {
			if len(c.Candidates) == 0 {
				continue
			}
			if c.Candidates[0].Content.Role != "" {
				role = c.Candidates[0].Content.Role
			}
			parts = append(parts, c.Candidates[0].Content.Parts...)
		}
		if len(parts) == 0 {
			return nil, nil
		}
		m, err := json.Marshal(map[string]any{"role": role, "parts": parts})
		if err != nil {
			return nil, malformedResponse("%v", err)
		}
		raw = append(append(json.RawMessage("["), m...), ']')
	default:
		return nil, fmt.Errorf("wire: unknown format %q", f)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	msgs, err := DecodeMessages(f, raw)
	if err != nil {
		return nil, malformedResponse("the answer: %v", err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	return msgs, nil
}
