// Package sse reads and writes server-sent events as the OpenAI and Anthropic streaming APIs
// send them: "event:" and "data:" lines, one event per blank-line-terminated block.
//
// Reader keeps each event's raw bytes so that a proxy can forward an event byte for byte when
// it does not need to change it.
package sse

import (
	"bufio"
	"bytes"
	"io"
)

// Event is one server-sent event.
type Event struct {
	// Name is the "event:" field (empty when absent).
	Name string
	// Data is the "data:" lines joined by newlines.
	Data []byte
	// Raw is the event exactly as read, terminating blank line included.
	Raw []byte
}

// Reader reads events from a stream.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next event. At the end of the stream it returns io.EOF; a last event not
// terminated by a blank line is returned first (with a nil error). Comment-only blocks
// (": keep-alive") are returned as events with no Name and no Data.
func (r *Reader) Next() (Event, error) {
	var ev Event
	var raw bytes.Buffer
	var data [][]byte
	for {
		line, err := r.r.ReadBytes('\n')
		if len(line) > 0 {
			raw.Write(line)
			trimmed := bytes.TrimRight(line, "\r\n")
			if len(trimmed) == 0 {
				if raw.Len() == len(line) { // leading blank lines between events
					raw.Reset()
					if err != nil {
						return ev, err
					}
					continue
				}
				ev.Raw = raw.Bytes()
				ev.Data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			field, value, _ := bytes.Cut(trimmed, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				ev.Name = string(value)
			case "data":
				data = append(data, bytes.Clone(value))
			}
		}
		if err != nil {
			if raw.Len() > 0 {
				raw.WriteString("\n")
				ev.Raw = raw.Bytes()
				ev.Data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			return ev, err
		}
	}
}

// Format renders an event: "event: NAME\n" when name is set, then "data: DATA\n", then a blank
// line. data must not contain newlines (JSON encoded by encoding/json never does).
func Format(name string, data []byte) []byte {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}
