package proxy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/wire"
)

// responsesFilter filters a Responses API event stream (response.created,
// response.output_item.added, response.function_call_arguments.delta/done,
// response.output_item.done, response.completed, ...). With the ctxmgr_read tool it holds back
// the output items that call it (every event of their output_index); when an answer's only
// client calls are ctxmgr_read, its response.completed is held, the proxy answers the calls,
// and the follow-up answer's events continue the same client stream: one response id, output
// indices continued, sequence numbers renumbered, and a final response.completed whose output
// lists every item the client was sent.
type responsesFilter struct {
	readTool bool
	round    int
	seq      int // next sequence_number the client sees
	offset   int // client output_index where this round's items start
	forward  int // items forwarded this round
	idxMap   map[int]int
	reads    map[int]*callBuf // read calls by upstream output_index
	order    []int            // upstream indices of this round's items, in order
	items    map[int]json.RawMessage
	allOut   []json.RawMessage // items the client was sent, every round
	respID   json.RawMessage   // the first round's response id
	other    bool
	held     bool
	prompt   wire.Usage
}

func (f *responsesFilter) usage() wire.Usage { return f.prompt }

type responsesEvent struct {
	Type        string          `json:"type"`
	OutputIndex *int            `json:"output_index"`
	Item        json.RawMessage `json:"item"`
	Delta       string          `json:"delta"`
	Arguments   *string         `json:"arguments"`
	Response    *struct {
		ID    json.RawMessage `json:"id"`
		Usage json.RawMessage `json:"usage"`
	} `json:"response"`
}

func (f *responsesFilter) event(ev sse.Event) []byte {
	var e responsesEvent
	if json.Unmarshal(ev.Data, &e) != nil {
		return ev.Raw
	}
	if e.Response != nil {
		if u := usageInput(FormatResponses, e.Response.Usage); u.Input > 0 {
			f.prompt = u
		}
	}
	if !f.readTool {
		return ev.Raw
	}
	if f.idxMap == nil {
		f.idxMap, f.reads, f.items = map[int]int{}, map[int]*callBuf{}, map[int]json.RawMessage{}
	}
	typ := e.Type
	if typ == "" {
		typ = ev.Name
	}
	switch typ {
	case "response.created", "response.in_progress":
		if f.round > 0 {
			return nil
		}
		if f.respID == nil && e.Response != nil {
			f.respID = e.Response.ID
		}
		return f.out(ev, nil)
	case "response.output_item.added":
		if e.OutputIndex == nil {
			return f.out(ev, nil)
		}
		idx := *e.OutputIndex
		var it responsesItem
		_ = json.Unmarshal(e.Item, &it)
		f.order = append(f.order, idx)
		if it.Type == "function_call" && it.Name == readToolName {
			f.reads[idx] = &callBuf{id: it.CallID, name: it.Name}
			f.idxMap[idx] = -1
			return nil
		}
		if clientCallTypes[it.Type] {
			f.other = true
		}
		f.idxMap[idx] = f.offset + f.forward
		f.forward++
		return f.out(ev, func(m map[string]json.RawMessage) { m["output_index"] = mustMarshal(f.idxMap[idx]) })
	case "response.completed":
		if len(f.reads) > 0 && !f.other {
			f.held = true
			return nil
		}
		return f.completed(ev)
	}
	if e.OutputIndex != nil {
		idx := *e.OutputIndex
		to, known := f.idxMap[idx]
		if known && to < 0 {
			cb := f.reads[idx]
			switch typ {
			case "response.function_call_arguments.delta":
				cb.args.WriteString(e.Delta)
			case "response.function_call_arguments.done":
				if e.Arguments != nil {
					cb.args.Reset()
					cb.args.WriteString(*e.Arguments)
				}
			case "response.output_item.done":
				f.items[idx] = e.Item
			}
			return nil
		}
		if typ == "response.output_item.done" {
			f.items[idx] = e.Item
			f.allOut = append(f.allOut, e.Item)
		}
		if known {
			return f.out(ev, func(m map[string]json.RawMessage) { m["output_index"] = mustMarshal(to) })
		}
	}
	return f.out(ev, nil)
}

// out renumbers an event (and applies edit) for the client.
func (f *responsesFilter) out(ev sse.Event, edit func(map[string]json.RawMessage)) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(ev.Data, &m) != nil {
		return ev.Raw
	}
	if _, ok := m["sequence_number"]; ok {
		m["sequence_number"] = mustMarshal(f.seq)
		f.seq++
	}
	if edit != nil {
		edit(m)
	}
	return sse.Format(ev.Name, mustMarshal(m))
}

// completed forwards the final event with the response id of the first round and the output
// the client was sent.
func (f *responsesFilter) completed(ev sse.Event) []byte {
	rewrite := f.round > 0 || len(f.reads) > 0
	return f.out(ev, func(m map[string]json.RawMessage) {
		if !rewrite {
			return
		}
		var resp map[string]json.RawMessage
		if json.Unmarshal(m["response"], &resp) != nil {
			return
		}
		if f.respID != nil {
			resp["id"] = f.respID
		}
		out := f.allOut
		if out == nil {
			out = []json.RawMessage{}
		}
		resp["output"] = mustMarshal(out)
		m["response"] = mustMarshal(resp)
	})
}

func (f *responsesFilter) pending() (chat.Message, []readCall) {
	if !f.held {
		return chat.Message{}, nil
	}
	var items []json.RawMessage
	var calls []readCall
	for _, idx := range slices.Sorted(slices.Values(f.order)) {
		if cb := f.reads[idx]; cb != nil {
			calls = append(calls, readCall{ID: cb.id, Args: cb.args.String()})
			if _, ok := f.items[idx]; !ok {
				f.items[idx] = mustMarshal(map[string]any{"type": "function_call", "call_id": cb.id, "name": cb.name, "arguments": cb.args.String()})
			}
		}
		if it, ok := f.items[idx]; ok {
			items = append(items, it)
		}
	}
	m, ok := assistantOf(items)
	if !ok {
		return chat.Message{}, nil
	}
	return m, calls
}

func (f *responsesFilter) next() {
	f.round++
	f.offset += f.forward
	f.forward, f.other, f.held, f.prompt = 0, false, false, wire.Usage{}
	f.idxMap, f.reads, f.items, f.order = nil, nil, nil, nil
}

func (f *responsesFilter) abort(note string) []byte {
	var b bytes.Buffer
	item := noteItem(strings.TrimSpace(note))
	textItemEvents(&b, &f.seq, f.offset+f.forward, item, strings.TrimSpace(note))
	f.allOut = append(f.allOut, item)
	id := "resp_ctxmgr"
	if f.respID != nil {
		_ = json.Unmarshal(f.respID, &id)
	}
	resp := responseObject(id, "", f.allOut)
	b.Write(sse.Format("response.completed", mustMarshal(map[string]any{"type": "response.completed", "sequence_number": f.seq, "response": resp})))
	f.seq++
	return b.Bytes()
}
