package proxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// The session inspector: read-only pages at /ui/ (the list of sessions) and
// /ui/sessions/{id} (one session), and the JSON they are drawn from under /ui/api/
// (docs/inspector.md). Everything it serves is embedded in the binary.
//
// Sessions hold code and secrets: the inspector is served without a token only when the
// proxy listens on loopback (Config.UILoopback), and then only to requests whose Host names
// the loopback (a page of another site that resolves its name to 127.0.0.1 gets nothing).
// On any other address it is off unless Config.UIToken is set, and with a token every
// inspector request must carry it. It never shows request headers or keys: the records it
// reads hold token counts, models and client names only.

//go:embed inspector_ui
var inspectorFiles embed.FS

// uiCookie holds the token once a "?token=" has been given.
const uiCookie = "ctxmgr_ui"

// inspector is the Server's inspector: its recorder and the list's cache.
type inspector struct {
	s   *Server
	rec *recorder

	mu sync.Mutex
	// last is each session's last prepared request (Server.prepared), for the next one's
	// record; at most maxLastSent sessions.
	last map[string]*chat.Request
	// rows caches each session's list row, valid while the session's Updated time is the
	// one cached and no request was recorded for it since.
	rows map[string]cachedRow
}

type cachedRow struct {
	updated time.Time
	row     SessionRow
}

// mountInspector starts the request recorder and registers the inspector's routes.
func (s *Server) mountInspector(mux *http.ServeMux) {
	in := &inspector{s: s, rows: map[string]cachedRow{}, last: map[string]*chat.Request{}}
	in.rec = newRecorder(s.cfg.Store, s.log, in.invalidate)
	s.insp = in
	assets, _ := fs.Sub(inspectorFiles, "inspector_ui/assets")
	fileServer := http.FileServerFS(assets)
	files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		fileServer.ServeHTTP(w, r)
	})
	// Each page is the layout around its own main part.
	page := func(name, title string) http.HandlerFunc {
		t := template.Must(template.New("").Funcs(template.FuncMap{"lower": strings.ToLower}).
			ParseFS(inspectorFiles, "inspector_ui/pages/layout.html", "inspector_ui/pages/"+name+".html"))
		data := struct{ Page, Title string }{name, title}
		return func(w http.ResponseWriter, r *http.Request) {
			var b bytes.Buffer
			if err := t.ExecuteTemplate(&b, "layout", data); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(b.Bytes())
		}
	}
	routes := map[string]http.HandlerFunc{
		"GET /ui/{$}":                                 page("list", "Sessions"),
		"GET /ui/sessions/{id}":                       page("session", "Session"),
		"GET /ui/assets/":                             http.StripPrefix("/ui/assets/", files).ServeHTTP,
		"GET /ui/api/rev":                             in.apiRev,
		"GET /ui/api/sessions":                        in.apiSessions,
		"GET /ui/api/sessions/{id}":                   in.apiSession,
		"GET /ui/api/sessions/{id}/timeline":          in.apiTimeline,
		"GET /ui/api/sessions/{id}/summaries":         in.apiSummaries,
		"GET /ui/api/sessions/{id}/summaries/diff":    in.apiDiff,
		"GET /ui/api/sessions/{id}/messages":          in.apiMessages,
		"GET /ui/api/sessions/{id}/messages/{pos}":    in.apiMessage,
		"GET /ui/api/sessions/{id}/offloads/{ref...}": in.apiOffload,
	}
	for pattern, h := range routes {
		mux.Handle(pattern, in.guard(h))
	}
	// Anything else under /ui/ is the inspector's too: never passed through upstream.
	mux.Handle("/ui/", in.guard(http.NotFound))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
}

// close stops the recorder once what it holds is written.
func (in *inspector) close() {
	if in != nil {
		in.rec.close()
	}
}

// maxLastSent bounds the sessions whose last prepared request the inspector keeps.
const maxLastSent = 4096

// swapLast records the session's latest prepared request and returns the one before it.
func (in *inspector) swapLast(id string, r *chat.Request) *chat.Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	prev := in.last[id]
	if prev == nil && len(in.last) >= maxLastSent {
		clear(in.last)
	}
	in.last[id] = r
	return prev
}

func (in *inspector) invalidate(id string, _ RequestRecord) {
	in.mu.Lock()
	delete(in.rows, id)
	in.mu.Unlock()
}

// row returns the session's list row, from the cache when it is current.
func (in *inspector) row(ctx context.Context, info store.SessionInfo, live bool) (SessionRow, error) {
	in.mu.Lock()
	c, ok := in.rows[info.ID]
	in.mu.Unlock()
	if ok && c.updated.Equal(info.Updated) {
		c.row.Live = live
		return c.row, nil
	}
	tl, err := in.s.timeline(ctx, info.ID)
	if err != nil {
		return SessionRow{}, err
	}
	row := rowFrom(info, &tl, live)
	in.mu.Lock()
	if len(in.rows) >= 4*maxListed {
		clear(in.rows)
	}
	in.rows[info.ID] = cachedRow{updated: info.Updated, row: row}
	in.mu.Unlock()
	return row, nil
}

// guard applies the safety rule to every inspector request and marks answers private.
func (in *inspector) guard(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := &in.s.cfg
		h2 := w.Header()
		h2.Set("Cache-Control", "no-store")
		h2.Set("X-Content-Type-Options", "nosniff")
		h2.Set("Referrer-Policy", "no-referrer")
		h2.Set("X-Frame-Options", "DENY")
		h2.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the inspector is read-only", http.StatusMethodNotAllowed)
			return
		}
		if cfg.UIToken == "" {
			if !cfg.UILoopback {
				http.Error(w, "ctxmgr: the inspector is off: the proxy listens on an address other than loopback and no --ui-token is set", http.StatusForbidden)
				return
			}
			if !loopbackHost(r.Host) {
				http.Error(w, "ctxmgr: the inspector answers only requests addressed to the loopback (127.0.0.1, [::1], localhost)", http.StatusForbidden)
				return
			}
			h(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" {
			if !sameToken(t, cfg.UIToken) {
				http.Error(w, "ctxmgr: wrong inspector token", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: cfg.UIToken, Path: "/ui/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			// The token leaves the address bar (and the history) at once.
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			http.Redirect(w, r, (&url.URL{Path: u.Path, RawQuery: u.RawQuery}).String(), http.StatusSeeOther)
			return
		}
		if !in.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctxmgr inspector"`)
			http.Error(w, "ctxmgr: the inspector needs its token: Authorization: Bearer TOKEN, or open /ui/?token=TOKEN once", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

func (in *inspector) authorized(r *http.Request) bool {
	want := in.s.cfg.UIToken
	if a := r.Header.Get("Authorization"); a != "" {
		if t, ok := strings.CutPrefix(a, "Bearer "); ok && sameToken(strings.TrimSpace(t), want) {
			return true
		}
	}
	if c, err := r.Cookie(uiCookie); err == nil && sameToken(c.Value, want) {
		return true
	}
	return false
}

func sameToken(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// IsLoopback reports whether a listen address (host:port, as net.Listen takes it) accepts
// connections from this machine only: a loopback IP or "localhost". An empty host (":8088",
// every interface) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return loopbackName(host)
}

// loopbackHost reports whether a request's Host names the loopback.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return loopbackName(host)
}

func loopbackName(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}

// fail answers an error: 404 for a session or message the store does not hold, 400 for a bad
// argument, 500 otherwise.
func fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errNoSession), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidID):
		status = http.StatusNotFound
	case errors.Is(err, errBadArg):
		status = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

var errBadArg = errors.New("bad argument")

func (in *inspector) apiRev(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]int64{"rev": in.rec.rev.Load()})
}

func (in *inspector) apiSessions(w http.ResponseWriter, r *http.Request) {
	rows, truncated, err := in.s.sessionList(r.Context(), r.URL.Query().Get("q"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"sessions": rows, "truncated": truncated, "rev": in.rec.rev.Load()})
}

func (in *inspector) apiSession(w http.ResponseWriter, r *http.Request) {
	d, err := in.s.detail(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, d)
}

func (in *inspector) apiTimeline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok, err := in.s.findStored(r.Context(), id); err != nil || !ok {
		fail(w, cmpErr(err))
		return
	}
	tl, err := in.s.timeline(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, tl)
}

// cmpErr is err, or errNoSession when there is none.
func cmpErr(err error) error {
	if err == nil {
		return errNoSession
	}
	return err
}

func (in *inspector) apiSummaries(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok, err := in.s.findStored(r.Context(), id); err != nil || !ok {
		fail(w, cmpErr(err))
		return
	}
	sums, err := in.s.cfg.Store.Summaries(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	if sums == nil {
		sums = []store.Summary{}
	}
	writeJSON(w, map[string]any{"versions": sums})
}

// apiDiff compares two summary versions: ?from=V&to=W (default: the two latest).
func (in *inspector) apiDiff(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sums, err := in.s.cfg.Store.Summaries(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	if len(sums) == 0 {
		fail(w, errNoSession)
		return
	}
	from, to := len(sums)-1, len(sums)
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		v    *int
	}{{"from", &from}, {"to", &to}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n > len(sums) {
				fail(w, errors.Join(errBadArg, errors.New(p.name+": want a summary version from 0 to "+strconv.Itoa(len(sums)))))
				return
			}
			*p.v = n
		}
	}
	text := func(v int) string {
		if v == 0 {
			return "" // before the first summary
		}
		for _, s := range sums {
			if s.Version == v {
				return s.Text
			}
		}
		return ""
	}
	writeJSON(w, map[string]any{"from": from, "to": to, "lines": diffLines(text(from), text(to))})
}

func (in *inspector) apiMessages(w http.ResponseWriter, r *http.Request) {
	rows, err := in.s.messages(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"messages": rows})
}

func (in *inspector) apiMessage(w http.ResponseWriter, r *http.Request) {
	pos, err := strconv.Atoi(r.PathValue("pos"))
	if err != nil {
		fail(w, errors.Join(errBadArg, errors.New("pos: want a message position")))
		return
	}
	m, err := in.s.message(r.Context(), r.PathValue("id"), pos)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, m)
}

// apiOffload reads an offloaded tool result back: ?from=LINE&lines=N (default: all of it).
func (in *inspector) apiOffload(w http.ResponseWriter, r *http.Request) {
	id, key := r.PathValue("id"), strings.TrimPrefix(r.PathValue("ref"), store.RefPrefix)
	from, lines := 1, 0
	if s := r.URL.Query().Get("from"); s != "" {
		from, _ = strconv.Atoi(s)
	}
	if s := r.URL.Query().Get("lines"); s != "" {
		lines, _ = strconv.Atoi(s)
	}
	text, total, err := in.s.cfg.Store.ReadOffload(r.Context(), id, key, from, lines)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"ref": store.RefPrefix + key, "from": from, "total_lines": total, "text": text})
}
