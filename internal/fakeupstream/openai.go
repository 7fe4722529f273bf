package fakeupstream

import (
	"encoding/json"
	"fmt"
	"strings"
)

// oMessage is one entry of an OpenAI chat-completions messages array, as the fake reads it.
type oMessage struct {
	Role      string `json:"role"`
	ToolCalls []struct {
		ID string `json:"id"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// checkOpenAI reads an OpenAI chat-completions body and checks it against the real API's
// rules: the schema (JSON, roles), then the pairing of tool_calls and tool messages.
func checkOpenAI(body []byte) checked {
	var c checked
	top, err := topLevel(body)
	if err != nil {
		c.v = openAIViolation(RuleParse, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", "", "")
		return c
	}
	if err := commonFields(top, &c); err != nil {
		c.v = openAIViolation(RuleParse, "Invalid type for '"+strings.SplitN(err.Error(), ":", 2)[0]+"'.", "", "invalid_type")
		return c
	}
	// max_completion_tokens wins when both are present (the API refuses nothing here).
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		n, ok, err := intField(top, k)
		if err != nil {
			c.v = openAIViolation(RuleParse, fmt.Sprintf("Invalid type for '%s': expected an integer.", k), k, "invalid_type")
			return c
		}
		if ok && n > 0 {
			c.maxTokens = n
		}
	}
	var msgs []oMessage
	raw, ok := top["messages"]
	if !ok || isNull(raw) {
		c.v = openAIViolation(RuleParse, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
		return c
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		c.v = openAIViolation(RuleParse, "Invalid type for 'messages': expected an array of objects.", "messages", "invalid_type")
		return c
	}
	if len(msgs) == 0 {
		c.v = openAIViolation(RuleParse, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
		return c
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			c.v = openAIViolation(RuleRole, fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role), fmt.Sprintf("messages[%d].role", i), "invalid_value")
			return c
		}
	}
	c.v = openAIPairing(msgs)
	return c
}

// openAIPairing checks that every assistant message's tool_calls are answered by tool messages
// with the same tool_call_id before the next message of any other role, and that every tool
// message answers a call of the assistant message before its run of tool messages.
func openAIPairing(msgs []oMessage) *violation {
	var open map[string]bool // the calls of the last assistant message, while tool messages follow it
	var order []string
	unanswered := func() []string {
		var ids []string
		for _, id := range order {
			if !open[id] {
				ids = append(ids, id)
			}
		}
		return ids
	}
	for i, m := range msgs {
		if m.Role == "tool" {
			if open == nil {
				return openAIViolation(RuleToolPairing, "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", fmt.Sprintf("messages.[%d].role", i), "")
			}
			if _, issued := open[m.ToolCallID]; !issued {
				return openAIViolation(RuleToolPairing, fmt.Sprintf("Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", m.ToolCallID), fmt.Sprintf("messages.[%d].tool_call_id", i), "")
			}
			open[m.ToolCallID] = true
			continue
		}
		if ids := unanswered(); len(ids) > 0 {
			return openAIViolation(RuleToolPairing, "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(ids, ", "), fmt.Sprintf("messages.[%d].role", i), "")
		}
		open, order = nil, nil
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			open = map[string]bool{}
			for _, tc := range m.ToolCalls {
				open[tc.ID] = false
				order = append(order, tc.ID)
			}
		}
	}
	if ids := unanswered(); len(ids) > 0 {
		return openAIViolation(RuleToolPairing, "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(ids, ", "), fmt.Sprintf("messages.[%d].role", len(msgs)-1), "")
	}
	return nil
}
