package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// The inspector's JSON documents (docs/inspector.md describes each path). Every figure is in
// tokens unless its name says otherwise; money is in base-price input tokens under the
// session's price profile (ctxmgr.Prices): multiply by the provider's base input price.

// SessionRow is one session of the inspector's list.
type SessionRow struct {
	ID string `json:"id"`
	// Live: the proxy holds the session in memory (it has served it since it started).
	Live           bool      `json:"live"`
	Model          string    `json:"model,omitempty"`
	Client         string    `json:"client,omitempty"`
	Format         Format    `json:"format,omitempty"`
	Messages       int       `json:"messages"`
	SummaryVersion int       `json:"summary_version"`
	Created        time.Time `json:"created"`
	// Updated is the last time its history or summary changed; LastActivity its last
	// request, if any was recorded, else Updated.
	Updated      time.Time `json:"updated"`
	LastActivity time.Time `json:"last_activity"`
	Requests     int       `json:"requests"`
	// LastSent and LastWindow: the last forwarded request's input tokens and window.
	LastSent   int `json:"last_sent"`
	LastWindow int `json:"last_window"`
	Money
}

// Money compares what the session's requests cost with what sending everything the client
// sent would have cost, both in base-price input tokens.
type Money struct {
	// Cost is what the requests sent cost: the cache reads and other input the provider
	// reported at the profile's cached and uncached prices, or, for a request whose answer
	// reported no cache figures, an estimate: its start that the previous request sent
	// identically (RequestRecord.Kept) is read from the cache, the rest is uncached.
	Cost float64 `json:"cost"`
	// CostAll is the same for the client's own requests (sending everything), estimated
	// with a perfect prompt cache: each request's prefix that the previous one sent is read
	// from the cache, the rest is uncached.
	CostAll float64 `json:"cost_all"`
	// Saved is CostAll - Cost; SavedPercent its share of CostAll.
	Saved        float64 `json:"saved"`
	SavedPercent float64 `json:"saved_percent"`
	// Estimated: some request's cost is estimated (its answer reported no cache figures).
	Estimated bool `json:"estimated"`
	// OverWindow counts the client's requests larger than their window: sending everything
	// would have had them refused.
	OverWindow int `json:"over_window"`
	// Prices is the profile the figures use (the latest request's).
	Prices PriceProfile `json:"prices"`
}

// Step is one pipeline step of a request: the Manager's event and when the store recorded it.
type Step struct {
	At time.Time `json:"at"`
	ctxmgr.Event
}

// TimelineEntry is one request of a session with the steps the pipeline ran on it.
type TimelineEntry struct {
	N int `json:"n"` // 1-based
	RequestRecord
	Steps []Step `json:"steps"`
	// Cost and CostAll are the request's share of Money.
	Cost      float64 `json:"cost"`
	CostAll   float64 `json:"cost_all"`
	Estimated bool    `json:"estimated,omitempty"`
}

// Timeline is a session's requests, oldest first.
type Timeline struct {
	Requests []TimelineEntry `json:"requests"`
	// Earlier holds steps recorded before the first recorded request (by the library, or
	// before the proxy recorded requests).
	Earlier []Step `json:"earlier,omitempty"`
	Money   Money  `json:"money"`
}

// buildTimeline groups a session's stored events into its requests: each step goes with the
// latest request that started at or before it.
func buildTimeline(evs []store.Event) Timeline {
	var tl Timeline
	var steps []Step
	for _, e := range evs {
		if e.Kind == RequestEventKind {
			var r RequestRecord
			if json.Unmarshal(e.Body, &r) == nil {
				tl.Requests = append(tl.Requests, TimelineEntry{RequestRecord: r, Steps: []Step{}})
			}
			continue
		}
		var ev ctxmgr.Event
		if json.Unmarshal(e.Body, &ev) != nil {
			continue
		}
		steps = append(steps, Step{At: e.At.UTC(), Event: ev})
	}
	// Records are written once a request is answered: order them by when they started.
	slices.SortStableFunc(tl.Requests, func(a, b TimelineEntry) int { return a.Start.Compare(b.Start) })
	for _, st := range steps {
		i, _ := slices.BinarySearchFunc(tl.Requests, st.At, func(e TimelineEntry, t time.Time) int {
			if e.Start.After(t) {
				return 1
			}
			return -1
		})
		if i == 0 {
			tl.Earlier = append(tl.Earlier, st)
			continue
		}
		tl.Requests[i-1].Steps = append(tl.Requests[i-1].Steps, st)
	}
	prevSent, prevRaw := 0, 0
	for i := range tl.Requests {
		e := &tl.Requests[i]
		e.N = i + 1
		p := e.Prices.prices()
		if p.Uncached == 0 {
			p = ctxmgr.PricesAnthropic
			e.Prices = PriceProfile{Uncached: p.Uncached, Cached: p.Cached}
		}
		if !e.Managed {
			continue // answered by the proxy: no upstream call
		}
		switch {
		case e.CacheRead > 0 || e.CacheWrite > 0:
			e.Cost = float64(e.CacheRead)*p.Cached + float64(e.Input-e.CacheRead)*p.Uncached
		default:
			cached := min(prevSent, e.Kept, e.Sent)
			e.Cost = float64(cached)*p.Cached + float64(e.Sent-cached)*p.Uncached
			e.Estimated = true
		}
		if e.Window > 0 && e.Raw > e.Window {
			tl.Money.OverWindow++
		}
		cachedAll := min(prevRaw, e.Raw)
		e.CostAll = float64(cachedAll)*p.Cached + float64(e.Raw-cachedAll)*p.Uncached
		prevSent, prevRaw = e.Sent, e.Raw
		tl.Money.Cost += e.Cost
		tl.Money.CostAll += e.CostAll
		tl.Money.Estimated = tl.Money.Estimated || e.Estimated
		tl.Money.Prices = e.Prices
	}
	tl.Money.Saved = tl.Money.CostAll - tl.Money.Cost
	if tl.Money.CostAll > 0 {
		tl.Money.SavedPercent = tl.Money.Saved * 100 / tl.Money.CostAll
	}
	return tl
}

// WindowNow is a session's next request against its window, by region.
type WindowNow struct {
	Window    int `json:"window"`
	MaxOutput int `json:"max_output"`
	System    int `json:"system"`
	Tools     int `json:"tools"`
	Summary   int `json:"summary"`
	History   int `json:"history"`
	// Input is system + tools + summary + history; Free what the window has left beside it
	// and the reply reserve (negative: over).
	Input      int     `json:"input"`
	Free       int     `json:"free"`
	UsePercent float64 `json:"use_percent"`
}

// SessionDetail is the inspector's page of a session.
type SessionDetail struct {
	SessionRow
	Preset  string `json:"preset"`
	Counter string `json:"counter"`
	// Window is the next request by region; Stats the /context statistics it comes from.
	Window  WindowNow      `json:"window"`
	Stats   ctxmgr.Stats   `json:"stats"`
	Summary *store.Summary `json:"summary,omitempty"`
}

// MessageRow is one message of the history as the next request shows it.
type MessageRow struct {
	Pos    int       `json:"pos"`
	Role   chat.Role `json:"role"`
	State  string    `json:"state"`
	Tokens int       `json:"tokens"`
	// Text is the view's text (tool calls as name(arguments)), cut to previewChars; Chars
	// is its whole length in characters.
	Text  string `json:"text"`
	Chars int    `json:"chars"`
	// Ref is the reference of an offloaded result's full text, if stored.
	Ref string `json:"ref,omitempty"`
}

// MessageFull is one message opened: the view sent and the original, read back from the
// store (the archive for an archived message), and an offloaded result's full text.
type MessageFull struct {
	MessageRow
	Original string `json:"original"`
	Offload  string `json:"offload,omitempty"`
	// OffloadError says why an offloaded text could not be read (expired, say).
	OffloadError string `json:"offload_error,omitempty"`
}

// previewChars bounds the text of a message in the list.
const previewChars = 1200

// messageText renders a message for a person: its text and reasoning, then its tool calls.
func messageText(m *chat.Message) string {
	var b strings.Builder
	for _, p := range m.Content {
		switch p.Type {
		case chat.PartText:
			b.WriteString(p.Text)
		case chat.PartReasoning:
			if p.Text != "" {
				b.WriteString("[reasoning] " + p.Text)
			}
		case chat.PartImage:
			b.WriteString("[image]")
		case chat.PartFile:
			b.WriteString("[file]")
		default:
			b.WriteString("[" + string(p.Type) + " block]")
		}
		b.WriteString("\n")
	}
	for _, tc := range m.ToolCalls {
		fmt.Fprintf(&b, "→ %s(%s)\n", tc.Name, tc.Arguments)
	}
	return strings.TrimRight(b.String(), "\n")
}

func cut(s string, n int) (string, int) {
	c := utf8.RuneCountInString(s)
	if c <= n {
		return s, c
	}
	r := []rune(s)
	return string(r[:n]) + "…", c
}

// view is a session's state for the inspector: the live Session, or one loaded from the
// store (closed by release).
type view struct {
	sess    *ctxmgr.Session
	live    bool
	preset  string
	counter string
	release func()
}

// errNoSession: the store holds nothing for the id.
var errNoSession = errors.New("no such session")

// open returns the session: the proxy's own when it is held in memory, else loaded from the
// store as a restarted proxy would.
func (s *Server) openView(ctx context.Context, id string) (*view, error) {
	if err := store.CheckID(id); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoSession, err)
	}
	s.sessMu.Lock()
	ps := s.sessions[id]
	s.sessMu.Unlock()
	if ps != nil {
		ps.mu.Lock()
		sess, mgr := ps.sess, ps.mgr
		ps.mu.Unlock()
		if sess != nil && mgr != nil {
			return &view{sess: sess, live: true, preset: s.cfg.Preset, counter: mgr.m.Config().Counter.Name(), release: func() {}}, nil
		}
	}
	if _, ok, err := s.findStored(ctx, id); err != nil || !ok {
		if err == nil {
			err = errNoSession
		}
		return nil, err
	}
	st, err := LoadStored(ctx, s.cfg.Store, id, StoredOverrides{})
	if err != nil {
		return nil, err
	}
	return &view{sess: st.Session, preset: st.Preset, counter: st.Counter, release: func() { _ = st.Close() }}, nil
}

// findStored returns the store's information on a session.
func (s *Server) findStored(ctx context.Context, id string) (store.SessionInfo, bool, error) {
	infos, err := s.cfg.Store.Sessions(ctx)
	if err != nil {
		return store.SessionInfo{}, false, err
	}
	i, ok := slices.BinarySearchFunc(infos, id, func(a store.SessionInfo, id string) int { return cmp.Compare(a.ID, id) })
	if !ok {
		return store.SessionInfo{}, false, nil
	}
	return infos[i], true, nil
}

// windowNow is the window by region from the /context statistics.
func windowNow(st ctxmgr.Stats) WindowNow {
	r := st.Regions
	return WindowNow{Window: st.Window, MaxOutput: st.MaxOutput, System: r.System, Tools: r.Tools, Summary: r.Summary,
		History: r.History, Input: st.Input, Free: st.Window - st.MaxOutput - st.Input, UsePercent: st.UsePercent}
}

// rowFrom fills a list row from the store's information and the session's timeline.
func rowFrom(info store.SessionInfo, tl *Timeline, live bool) SessionRow {
	row := SessionRow{ID: info.ID, Live: live, Messages: info.Messages, SummaryVersion: info.Summary,
		Created: info.Created.UTC(), Updated: info.Updated.UTC(), LastActivity: info.Updated.UTC(), Requests: len(tl.Requests), Money: tl.Money}
	for i := len(tl.Requests) - 1; i >= 0; i-- {
		r := &tl.Requests[i]
		if row.Model == "" {
			row.Model, row.Client, row.Format = r.Model, r.Client, r.Format
			if end := r.Start.Add(time.Duration(r.Millis) * time.Millisecond); end.After(row.LastActivity) {
				row.LastActivity = end.UTC()
			}
		}
		if r.Managed {
			row.LastSent, row.LastWindow = r.Sent, r.Window
			break
		}
	}
	return row
}

// maxListed bounds the sessions the list considers: the most recently updated.
const maxListed = 500

// sessionList lists the sessions, most recent activity first, those matching q (a
// case-insensitive substring of the id, model or client) only.
func (s *Server) sessionList(ctx context.Context, q string) ([]SessionRow, bool, error) {
	infos, err := s.cfg.Store.Sessions(ctx)
	if err != nil {
		return nil, false, err
	}
	slices.SortFunc(infos, func(a, b store.SessionInfo) int { return b.Updated.Compare(a.Updated) })
	truncated := len(infos) > maxListed
	if truncated {
		infos = infos[:maxListed]
	}
	s.sessMu.Lock()
	live := make(map[string]bool, len(s.sessions))
	for id := range s.sessions {
		live[id] = true
	}
	s.sessMu.Unlock()
	q = strings.ToLower(strings.TrimSpace(q))
	rows := []SessionRow{}
	for _, info := range infos {
		row, err := s.insp.row(ctx, info, live[info.ID])
		if err != nil {
			return nil, false, err
		}
		if q != "" && !strings.Contains(strings.ToLower(row.ID+"\x00"+row.Model+"\x00"+row.Client+"\x00"+string(row.Format)), q) {
			continue
		}
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b SessionRow) int { return b.LastActivity.Compare(a.LastActivity) })
	return rows, truncated, nil
}

// timeline reads a session's events and builds its timeline.
func (s *Server) timeline(ctx context.Context, id string) (Timeline, error) {
	evs, err := s.cfg.Store.Events(ctx, id)
	if err != nil {
		return Timeline{}, err
	}
	return buildTimeline(evs), nil
}

// detail builds a session's page.
func (s *Server) detail(ctx context.Context, id string) (*SessionDetail, error) {
	v, err := s.openView(ctx, id)
	if err != nil {
		return nil, err
	}
	defer v.release()
	info, _, err := s.findStored(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.ID == "" {
		info.ID = id
	}
	tl, err := s.timeline(ctx, id)
	if err != nil {
		return nil, err
	}
	st := v.sess.Stats()
	d := &SessionDetail{SessionRow: rowFrom(info, &tl, v.live), Preset: v.preset, Counter: v.counter, Window: windowNow(st), Stats: st,
		Summary: v.sess.Summary()}
	d.Messages = st.Total
	return d, nil
}

// messages lists the history as the next request shows it.
func (s *Server) messages(ctx context.Context, id string) ([]MessageRow, error) {
	v, err := s.openView(ctx, id)
	if err != nil {
		return nil, err
	}
	defer v.release()
	views := v.sess.Views()
	rows := make([]MessageRow, len(views))
	for i := range views {
		rows[i] = messageRow(&views[i])
	}
	return rows, nil
}

func messageRow(mv *ctxmgr.MessageView) MessageRow {
	r := MessageRow{Pos: mv.Pos, Role: mv.Role, State: mv.State, Tokens: mv.Tokens}
	if mv.State != ctxmgr.StateArchived {
		r.Text, r.Chars = cut(messageText(&mv.View), previewChars)
	}
	if mv.Offload != nil {
		r.Ref = mv.Offload.Ref()
	}
	return r
}

// message opens one message: its view, its original from the store (the archive when it
// was archived) and its offloaded text.
func (s *Server) message(ctx context.Context, id string, pos int) (*MessageFull, error) {
	v, err := s.openView(ctx, id)
	if err != nil {
		return nil, err
	}
	defer v.release()
	views := v.sess.Views()
	if pos < 0 || pos >= len(views) {
		return nil, fmt.Errorf("%w: message %d of %d", errNoSession, pos, len(views))
	}
	mv := &views[pos]
	out := &MessageFull{MessageRow: messageRow(mv)}
	if mv.State != ctxmgr.StateArchived {
		out.Text, out.Chars = messageText(&mv.View), utf8.RuneCountInString(out.Text)
	}
	st := s.cfg.Store
	if mv.State == ctxmgr.StateArchived {
		arch, err := st.ReadArchive(ctx, id, pos, pos+1)
		if err != nil {
			return nil, err
		}
		if len(arch) == 1 {
			out.Original = messageText(&arch[0].Message)
		}
	} else {
		msgs, err := st.Messages(ctx, id, pos, pos+1)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 1 {
			out.Original = messageText(&msgs[0])
		}
	}
	if mv.Offload != nil {
		text, _, err := st.ReadOffload(ctx, id, mv.Offload.Key, 1, 0)
		if err != nil {
			out.OffloadError = err.Error()
		} else {
			out.Offload = text
		}
	}
	return out, nil
}

// DiffLine is one line of a diff between two summary versions: Op is "=" (in both), "-"
// (only in the older) or "+" (only in the newer).
type DiffLine struct {
	Op   string `json:"op"`
	Text string `json:"text"`
}

// maxDiffLines bounds the lines of each side a diff compares line by line (the rest is shown
// as removed and added).
const maxDiffLines = 1500

// diffLines is a line diff of a and b by longest common subsequence.
func diffLines(a, b string) []DiffLine {
	lines := func(s string) []string {
		if s == "" {
			return nil // no text has no lines, not one empty line
		}
		return strings.Split(s, "\n")
	}
	x, y := lines(a), lines(b)
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		out := make([]DiffLine, 0, len(x)+len(y))
		for _, l := range x {
			out = append(out, DiffLine{"-", l})
		}
		for _, l := range y {
			out = append(out, DiffLine{"+", l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		switch {
		case x[i] == y[j]:
			out = append(out, DiffLine{"=", x[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, DiffLine{"-", x[i]})
			i++
		default:
			out = append(out, DiffLine{"+", y[j]})
			j++
		}
	}
	for ; i < len(x); i++ {
		out = append(out, DiffLine{"-", x[i]})
	}
	for ; j < len(y); j++ {
		out = append(out, DiffLine{"+", y[j]})
	}
	return out
}
