package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Input formats (Load's format argument). FormatAuto detects each file's format.
const (
	FormatAuto = "auto"
	// FormatOpenAI: a JSON array of OpenAI chat messages, an OpenAI request body (an object
	// with "messages" and optional "tools"), or a trajectory object that carries them, or an
	// array of such objects.
	FormatOpenAI = "openai"
	// FormatAnthropic: an Anthropic messages request body (top-level "system", tool_use and
	// tool_result blocks).
	FormatAnthropic = "anthropic"
	// FormatJSONL: one request or trajectory object a line.
	FormatJSONL = "jsonl"
	// FormatTauBench: tau-bench result files, a list of {task_id, reward, info, traj, trial}.
	FormatTauBench = "tau-bench"
	// FormatMiniSWEAgent: mini-swe-agent trajectories (trajectory_format "mini-swe-agent-1").
	FormatMiniSWEAgent = "mini-swe-agent"
)

// Formats lists the formats Load accepts.
func Formats() []string {
	return []string{FormatAuto, FormatOpenAI, FormatAnthropic, FormatJSONL, FormatTauBench, FormatMiniSWEAgent}
}

// Trajectory is one recorded agent run: its system prompt (the leading system messages), its
// tool definitions and the rest of its messages, in order.
type Trajectory struct {
	// Name identifies the run: "<set>/<file>", with "#N" for the N-th run of a file that holds
	// several (0-based array index, or 1-based line number for JSONL).
	Name string
	// Set is the name of the directory the file is in ("tau-bench", "mini-swe-agent"): results
	// are also totalled per set.
	Set string
	// Path is the file the run was read from.
	Path     string
	System   []chat.Message
	Tools    []chat.Tool
	Messages []chat.Message
	// Recorded holds the usage the provider reported for the LLM call that produced the
	// assistant message at each index of Messages, when the file has it (mini-swe-agent's
	// "extra"). Nil when unknown.
	Recorded map[int]Usage
}

// inferTools returns tools, or, when a run makes tool calls but its file records no tool
// definitions (OpenHands trajectories keep only the messages), the smallest definitions of
// the tools it calls: a client that makes tool calls declares its tools, so every request of
// the run carried some (the same for every strategy), and the proxy declares ctxmgr_read in
// such a conversation.
func inferTools(tools []chat.Tool, msgs []chat.Message) []chat.Tool {
	if len(tools) > 0 {
		return tools
	}
	seen := map[string]bool{}
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			if tc.Name != "" && !seen[tc.Name] {
				seen[tc.Name] = true
				tools = append(tools, chat.Tool{Name: tc.Name, Parameters: json.RawMessage(`{"type":"object"}`)})
			}
		}
	}
	return tools
}

// Usage is what a provider reported for one LLM call.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Calls returns the number of LLM calls of the run: its assistant messages.
func (t *Trajectory) Calls() int {
	n := 0
	for i := range t.Messages {
		if t.Messages[i].Role == chat.RoleAssistant {
			n++
		}
	}
	return n
}

// Errors Load wraps (test with errors.Is).
var (
	// ErrUnknownFormat: the input is JSON, but not in a format Load knows.
	ErrUnknownFormat = errors.New("unknown trajectory format")
	// ErrMalformed: the input is not valid JSON (or JSONL).
	ErrMalformed = errors.New("malformed JSON")
	// ErrInvalidHistory: the messages decode but do not form a valid conversation (orphan tool
	// result, call without a result, unknown role, ...).
	ErrInvalidHistory = errors.New("invalid history")
)

// LoadError is a Load failure: the file, where in it ("line 3, column 14", "[12].traj",
// "line 4", "messages[5]"), and what went wrong.
type LoadError struct {
	Path string
	Pos  string
	Err  error
}

func (e *LoadError) Error() string {
	s := "replay: " + e.Path
	if e.Pos != "" {
		s += ": " + e.Pos
	}
	return s + ": " + e.Err.Error()
}

func (e *LoadError) Unwrap() error { return e.Err }

// Skipped is a file found in a directory that is well-formed JSON but no trajectory (a results
// summary, say): Load leaves it out rather than fail.
type Skipped struct {
	Path   string
	Reason string
}

// load reads the trajectories in paths (files, or directories searched recursively for
// *.json and *.jsonl files, in lexical order) into memory, for tests; the CLI streams them
// with LoadEach. format is one of Formats ("" means auto).
func load(paths []string, format string) ([]Trajectory, error) {
	var out []Trajectory
	_, err := LoadEach(paths, format, func(t Trajectory) error {
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LoadEach reads the trajectories in paths (files, or directories searched recursively for
// *.json and *.jsonl files, in lexical order), one file at a time, and hands each to
// fn as soon as its file is read, so that a caller that does not keep them (RunStream) holds
// one file's trajectories at a time, not all of them. It stops at fn's first error.
func LoadEach(paths []string, format string, fn func(Trajectory) error) ([]Skipped, error) {
	return loadEach(osFiles{}, paths, format, fn)
}

// LoadEachFS is LoadEach over fsys: paths are slash-separated paths of fsys ("." for all of
// it), and a file's set is the name of the directory it is in, as with LoadEach. The
// embedded sample (ctxmgr replay with no PATH) is read this way.
func LoadEachFS(fsys fs.FS, paths []string, format string, fn func(Trajectory) error) ([]Skipped, error) {
	return loadEach(fsFiles{fsys}, paths, format, fn)
}

// files is where LoadEach reads: the operating system's files, or an fs.FS.
type files interface {
	stat(p string) (fs.FileInfo, error)
	walk(root string, fn fs.WalkDirFunc) error
	read(p string) ([]byte, error)
	// set is the name of the directory p is in.
	set(p string) string
	base(p string) string
	ext(p string) string
}

// osFiles reads the operating system's files.
type osFiles struct{}

func (osFiles) stat(p string) (fs.FileInfo, error)        { return os.Stat(p) }
func (osFiles) walk(root string, fn fs.WalkDirFunc) error { return filepath.WalkDir(root, fn) }
func (osFiles) read(p string) ([]byte, error)             { return os.ReadFile(p) }
func (osFiles) base(p string) string                      { return filepath.Base(p) }
func (osFiles) ext(p string) string                       { return filepath.Ext(p) }
func (osFiles) set(p string) string {
	abs, _ := filepath.Abs(p)
	return filepath.Base(filepath.Dir(abs))
}

// fsFiles reads an fs.FS.
type fsFiles struct{ fsys fs.FS }

func (f fsFiles) stat(p string) (fs.FileInfo, error)        { return fs.Stat(f.fsys, p) }
func (f fsFiles) walk(root string, fn fs.WalkDirFunc) error { return fs.WalkDir(f.fsys, root, fn) }
func (f fsFiles) read(p string) ([]byte, error)             { return fs.ReadFile(f.fsys, p) }
func (fsFiles) base(p string) string                        { return path.Base(p) }
func (fsFiles) ext(p string) string                         { return path.Ext(p) }
func (fsFiles) set(p string) string                         { return path.Base(path.Dir(p)) }

func loadEach(fsys files, paths []string, format string, fn func(Trajectory) error) ([]Skipped, error) {
	if format == "" {
		format = FormatAuto
	}
	if !knownFormat(format) {
		return nil, fmt.Errorf("replay: unknown format %q (known: %s)", format, strings.Join(Formats(), ", "))
	}
	var skipped []Skipped
	names := map[string]int{}
	add := func(ts []Trajectory) error {
		for _, t := range ts {
			if n := names[t.Name]; n > 0 {
				names[t.Name] = n + 1
				t.Name = fmt.Sprintf("%s (%d)", t.Name, n+1)
			} else {
				names[t.Name] = 1
			}
			t.Tools = inferTools(t.Tools, t.Messages)
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		info, err := fsys.stat(p)
		if err != nil {
			return nil, &LoadError{Path: p, Err: err}
		}
		if !info.IsDir() {
			ts, err := loadFile(fsys, p, format)
			if err != nil {
				return nil, err
			}
			if err := add(ts); err != nil {
				return nil, err
			}
			continue
		}
		var found []string
		err = fsys.walk(p, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name != p && strings.HasPrefix(d.Name(), ".") {
					return fs.SkipDir
				}
				return nil
			}
			switch strings.ToLower(fsys.ext(name)) {
			case ".json", ".jsonl":
				found = append(found, name)
			}
			return nil
		})
		if err != nil {
			return nil, &LoadError{Path: p, Err: err}
		}
		sort.Strings(found)
		for _, f := range found {
			ts, err := loadFile(fsys, f, format)
			var nt *notTrajectory
			if errors.As(err, &nt) {
				skipped = append(skipped, Skipped{Path: f, Reason: nt.reason})
				continue
			}
			if err != nil {
				return nil, err
			}
			if err := add(ts); err != nil {
				return nil, err
			}
		}
	}
	return skipped, nil
}

func knownFormat(f string) bool {
	for _, k := range Formats() {
		if f == k {
			return true
		}
	}
	return false
}

// notTrajectory marks well-formed JSON in no trajectory format.
type notTrajectory struct{ reason string }

func (e *notTrajectory) Error() string { return e.reason }
func (e *notTrajectory) Unwrap() error { return ErrUnknownFormat }

func notTraj(format string, args ...any) error {
	return &notTrajectory{reason: fmt.Sprintf(format, args...)}
}

// source is the file being decoded, for names and errors.
type source struct {
	path, set, name string
	data            []byte
	format          string
}

func (s *source) fail(pos string, err error) error {
	var le *LoadError
	if errors.As(err, &le) {
		return err
	}
	return &LoadError{Path: s.path, Pos: pos, Err: err}
}

func loadFile(fsys files, path, format string) ([]Trajectory, error) {
	data, err := fsys.read(path)
	if err != nil {
		return nil, &LoadError{Path: path, Err: err}
	}
	set := fsys.set(path)
	src := &source{path: path, set: set, name: set + "/" + fsys.base(path), data: data, format: format}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, src.fail("", notTraj("empty file"))
	}
	if format == FormatJSONL || format == FormatAuto && strings.EqualFold(fsys.ext(path), ".jsonl") {
		return src.jsonl(data)
	}
	// One JSON value, or several (JSON lines in a .json file).
	dec := json.NewDecoder(bytes.NewReader(data))
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, src.fail(jsonPos(data, err), fmt.Errorf("%w: %v", ErrMalformed, plainJSONErr(err)))
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		if rest[0] == '{' && (format == FormatAuto || format == FormatJSONL) {
			return src.jsonl(data)
		}
		off := int64(len(data) - len(rest))
		return nil, src.fail(posAt(data, off), fmt.Errorf("%w: unexpected data after the top-level value", ErrMalformed))
	}
	switch trimmed[0] {
	case '[':
		return src.array(trimmed)
	case '{':
		t, err := src.object(trimmed, "", src.name)
		if err != nil {
			return nil, err
		}
		return []Trajectory{t}, nil
	}
	return nil, src.fail("", notTraj("a JSON %s, not an array or object", jsonKind(trimmed[0])))
}

func jsonKind(c byte) string {
	switch c {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonl decodes a stream of objects: one a line (JSONL), or any JSON values one after the
// other. Each is named by the line it starts on.
func (s *source) jsonl(data []byte) ([]Trajectory, error) {
	var out []Trajectory
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		off := dec.InputOffset()
		for off < int64(len(data)) && isSpace(data[off]) {
			off++
		}
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		line := bytes.Count(data[:off], []byte("\n")) + 1
		pos := "line " + strconv.Itoa(line)
		if err != nil {
			p := jsonPos(data, err)
			if p == "" {
				p = pos
			}
			return nil, s.fail(p, fmt.Errorf("%w: %v", ErrMalformed, plainJSONErr(err)))
		}
		if raw[0] != '{' {
			return nil, s.fail(pos, fmt.Errorf("%w: a JSONL line must be an object, not a JSON %s", ErrUnknownFormat, jsonKind(raw[0])))
		}
		t, err := s.object(raw, pos, fmt.Sprintf("%s#%d", s.name, line))
		if err != nil {
			var nt *notTrajectory
			if errors.As(err, &nt) {
				err = fmt.Errorf("%w: %s", ErrUnknownFormat, nt.reason)
			}
			return nil, s.fail(pos, err)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, s.fail("", notTraj("no JSON lines"))
	}
	return out, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// array decodes a top-level array: OpenAI messages, tau-bench results, or request objects.
func (s *source) array(data []byte) ([]Trajectory, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(data, &elems); err != nil {
		return nil, s.fail(jsonPos(s.data, err), fmt.Errorf("%w: %v", ErrMalformed, plainJSONErr(err)))
	}
	if len(elems) == 0 {
		return nil, s.fail("", notTraj("an empty array"))
	}
	var first map[string]json.RawMessage
	if err := json.Unmarshal(elems[0], &first); err != nil {
		return nil, s.fail("[0]", notTraj("array of %s, not of messages or trajectories", jsonKind(bytes.TrimSpace(elems[0])[0])))
	}
	_, hasRole := first["role"]
	_, hasTraj := first["traj"]
	_, hasMsgs := first["messages"]
	_, hasTF := first["trajectory_format"]
	switch s.format {
	case FormatTauBench:
		if !hasTraj {
			return nil, s.fail("[0]", notTraj("not a tau-bench result: no \"traj\" field"))
		}
	case FormatMiniSWEAgent:
		if !hasTF {
			return nil, s.fail("[0]", notTraj("not a mini-swe-agent trajectory: no \"trajectory_format\" field"))
		}
	case FormatAnthropic:
		if hasRole {
			return nil, s.fail("", notTraj("a bare message array is OpenAI, not an Anthropic body"))
		}
	}
	switch {
	case hasRole:
		t, err := s.messages(elems, "", s.name)
		if err != nil {
			return nil, err
		}
		return []Trajectory{t}, nil
	case hasTraj || hasMsgs || hasTF:
		out := make([]Trajectory, 0, len(elems))
		for i, e := range elems {
			pos := fmt.Sprintf("[%d]", i)
			if b := bytes.TrimSpace(e); len(b) == 0 || b[0] != '{' {
				return nil, s.fail(pos, fmt.Errorf("%w: an element of the array is not an object", ErrUnknownFormat))
			}
			t, err := s.object(e, pos, fmt.Sprintf("%s#%d", s.name, i))
			if err != nil {
				var nt *notTrajectory
				if errors.As(err, &nt) {
					err = fmt.Errorf("%w: %s", ErrUnknownFormat, nt.reason)
				}
				return nil, s.fail(pos, err)
			}
			out = append(out, t)
		}
		return out, nil
	}
	return nil, s.fail("[0]", notTraj("array of objects with neither \"role\" (OpenAI messages) nor \"traj\" (tau-bench results) nor \"messages\""))
}

// object decodes one object: a mini-swe-agent trajectory, a tau-bench result, or a request
// body (OpenAI or Anthropic).
func (s *source) object(data []byte, pos, name string) (Trajectory, error) {
	var o map[string]json.RawMessage
	if err := json.Unmarshal(data, &o); err != nil {
		return Trajectory{}, s.fail(pos, fmt.Errorf("%w: %v", ErrMalformed, plainJSONErr(err)))
	}
	at := func(field string) string {
		if pos == "" {
			return field
		}
		return pos + "." + field
	}
	if raw, ok := o["trajectory_format"]; ok {
		var tf string
		if err := json.Unmarshal(raw, &tf); err != nil || tf != "mini-swe-agent-1" {
			return Trajectory{}, s.fail(at("trajectory_format"), fmt.Errorf("%w: trajectory_format %s (known: \"mini-swe-agent-1\")", ErrUnknownFormat, raw))
		}
		if s.format != FormatAuto && s.format != FormatMiniSWEAgent && s.format != FormatJSONL {
			return Trajectory{}, s.fail(pos, notTraj("a mini-swe-agent trajectory, not %s", s.format))
		}
		return s.miniSWEAgent(o, pos, name)
	}
	if s.format == FormatMiniSWEAgent {
		return Trajectory{}, s.fail(pos, notTraj("not a mini-swe-agent trajectory: no \"trajectory_format\" field"))
	}
	if raw, ok := o["traj"]; ok {
		if s.format != FormatAuto && s.format != FormatTauBench && s.format != FormatJSONL {
			return Trajectory{}, s.fail(pos, notTraj("a tau-bench result, not %s", s.format))
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return Trajectory{}, s.fail(at("traj"), fmt.Errorf("%w: traj is not an array of messages: %v", ErrMalformed, plainJSONErr(err)))
		}
		return s.messages(msgs, at("traj"), name)
	}
	if s.format == FormatTauBench {
		return Trajectory{}, s.fail(pos, notTraj("not a tau-bench result: no \"traj\" field"))
	}
	if _, ok := o["messages"]; !ok {
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, strconv.Quote(k))
		}
		sort.Strings(keys)
		if len(keys) > 8 {
			keys = append(keys[:8], "...")
		}
		return Trajectory{}, s.fail(pos, notTraj("an object without \"messages\", \"traj\" or \"trajectory_format\" (keys: %s)", strings.Join(keys, ", ")))
	}
	f := wire.Detect(data)
	switch s.format {
	case FormatOpenAI:
		f = wire.OpenAI
	case FormatAnthropic:
		f = wire.Anthropic
	}
	req, err := wire.Decode(f, data)
	if err != nil {
		return Trajectory{}, s.fail(at("messages"), err)
	}
	t := Trajectory{Name: name, Set: s.set, Path: s.path, System: req.System, Tools: req.Tools, Messages: req.Messages}
	// An Anthropic body splits tool_result blocks into messages of their own, so positions
	// are those of the converted history; an OpenAI body's are the file's.
	off := len(req.System)
	if f == wire.Anthropic {
		off = 0
	}
	return t, s.check(&t, at("messages"), off)
}

// messages decodes an OpenAI message list, system messages first.
func (s *source) messages(raws []json.RawMessage, pos, name string) (Trajectory, error) {
	msgs := make([]chat.Message, 0, len(raws))
	for i, raw := range raws {
		m, err := wire.DecodeOpenAIMessage(i, raw)
		if err != nil {
			return Trajectory{}, s.fail(pos, err)
		}
		msgs = append(msgs, m)
	}
	n := 0
	for n < len(msgs) && msgs[n].Role == chat.RoleSystem {
		n++
	}
	t := Trajectory{Name: name, Set: s.set, Path: s.path, System: msgs[:n:n], Messages: msgs[n:]}
	return t, s.check(&t, pos, n)
}

// check validates a converted trajectory: message fields, and tool-call pairing as a
// provider enforces it (a trailing assistant message may still wait for its results). off is
// added to message indices in errors so that they count in the file.
func (s *source) check(t *Trajectory, pos string, off int) error {
	if err := chat.Validate(t.System); err != nil {
		return s.fail(pos, fmt.Errorf("%w: system prompt: %w", ErrInvalidHistory, err))
	}
	shift := func(err error) error {
		var ce *chat.Error
		if errors.As(err, &ce) && ce.Index >= 0 {
			c := *ce
			c.Index += off
			err = &c
		}
		return fmt.Errorf("%w: %w", ErrInvalidHistory, err)
	}
	if err := chat.Validate(t.Messages); err != nil {
		return s.fail(pos, shift(err))
	}
	if err := turns.Validate(t.Messages, turns.ValidateOptions{AllowPendingTail: true}); err != nil {
		return s.fail(pos, shift(err))
	}
	return nil
}

// bashBlock is mini-swe-agent's action regex: a fenced bash block.
var bashBlock = regexp.MustCompile("(?s)```bash\\s*\\n(.*?)\\n```")

var returnCode = regexp.MustCompile(`<returncode>\s*(-?\d+)\s*</returncode>`)

// miniSWEAgent converts a mini-swe-agent trajectory. Its messages carry no tool-call fields:
// the agent's action is the single fenced bash block of an assistant message, and the next
// user message is that command's observation (<returncode>/<output>, a timeout notice, or,
// after the final submission command, the submitted output). So an assistant message with
// exactly one bash block keeps its text and gains one call of a synthetic "bash" tool (id
// "mswea_<hash of the file name>_<message index>", arguments {"command": <the block>}), and
// the user message right after it becomes the call's result, its text verbatim (an error when
// the return code is not 0). An assistant message with no block or several (mini-swe-agent
// answers it with a format error) makes no call, and the user message after it stays a user
// message. "extra" (the raw API response) is dropped from the messages; its reported usage is
// kept in Trajectory.Recorded.
func (s *source) miniSWEAgent(o map[string]json.RawMessage, pos, name string) (Trajectory, error) {
	at := func(field string) string {
		if pos == "" {
			return field
		}
		return pos + "." + field
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(o["messages"], &raws); err != nil {
		return Trajectory{}, s.fail(at("messages"), fmt.Errorf("%w: messages is not an array: %v", ErrMalformed, plainJSONErr(err)))
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:4])
	msgs := make([]chat.Message, 0, len(raws))
	recorded := map[int]Usage{}
	for i, raw := range raws {
		var mo map[string]json.RawMessage
		if err := json.Unmarshal(raw, &mo); err != nil {
			return Trajectory{}, s.fail(fmt.Sprintf("%s[%d]", at("messages"), i), fmt.Errorf("%w: %v", ErrMalformed, plainJSONErr(err)))
		}
		extra, hasExtra := mo["extra"]
		if hasExtra {
			delete(mo, "extra")
			var err error
			if raw, err = json.Marshal(mo); err != nil {
				return Trajectory{}, s.fail(fmt.Sprintf("%s[%d]", at("messages"), i), fmt.Errorf("%w: %v", ErrMalformed, err))
			}
		}
		m, err := wire.DecodeOpenAIMessage(i, raw)
		if err != nil {
			return Trajectory{}, s.fail(at("messages"), err)
		}
		if hasExtra {
			if u, ok := reportedUsage(extra); ok {
				recorded[i] = u
			}
		}
		msgs = append(msgs, m)
	}
	n := 0
	for n < len(msgs) && msgs[n].Role == chat.RoleSystem {
		n++
	}
	t := Trajectory{Name: name, Set: s.set, Path: s.path, System: msgs[:n:n]}
	t.Tools = []chat.Tool{{
		Name:        "bash",
		Description: "Run one bash command (or commands joined with && or ||) in the repository and return its exit code and output.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"the bash command to run"}},"required":["command"]}`),
	}}
	hist := msgs[n:]
	out := make([]chat.Message, 0, len(hist))
	for k := 0; k < len(hist); k++ {
		m := hist[k]
		if m.Role == chat.RoleAssistant && k+1 < len(hist) && hist[k+1].Role == chat.RoleUser && len(m.ToolCalls) == 0 {
			if blocks := bashBlock.FindAllStringSubmatch(m.Text(), -1); len(blocks) == 1 {
				id := fmt.Sprintf("mswea_%s_%d", hash, n+k)
				m.ToolCalls = []chat.ToolCall{{ID: id, Name: "bash", Arguments: commandArgs(strings.TrimSpace(blocks[0][1]))}}
				obs := hist[k+1].Text()
				isErr := false
				if rc := returnCode.FindStringSubmatch(obs); rc != nil && rc[1] != "0" {
					isErr = true
				}
				out = append(out, m, chat.ToolResult(id, "bash", obs, isErr))
				k++
				continue
			}
		}
		out = append(out, m)
	}
	t.Messages = out
	if len(recorded) > 0 {
		// Indices of the converted history: the conversion keeps one message per message.
		t.Recorded = make(map[int]Usage, len(recorded))
		for i, u := range recorded {
			if i >= n {
				t.Recorded[i-n] = u
			}
		}
	}
	return t, s.check(&t, at("messages"), n)
}

// commandArgs is the JSON arguments {"command": cmd}, without HTML escaping.
func commandArgs(cmd string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"command": cmd})
	return strings.TrimSuffix(b.String(), "\n")
}

// reportedUsage reads the provider usage of a mini-swe-agent "extra" object.
func reportedUsage(extra json.RawMessage) (Usage, bool) {
	var e struct {
		Response struct {
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(extra, &e) != nil || e.Response.Usage == nil {
		return Usage{}, false
	}
	u := Usage{InputTokens: e.Response.Usage.PromptTokens, OutputTokens: e.Response.Usage.CompletionTokens}
	if d := e.Response.Usage.PromptTokensDetails; d != nil {
		u.CachedTokens = d.CachedTokens
	}
	return u, true
}

// jsonPos turns a decoding error into "line L, column C" of data, when it carries an offset.
func jsonPos(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return posAt(data, se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return posAt(data, te.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return posAt(data, int64(len(data)))
	}
	return ""
}

// posAt returns "line L, column C" (1-based, columns in bytes) of byte offset off.
func posAt(data []byte, off int64) string {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	if col == 0 && off > 0 {
		col = 1
	}
	return fmt.Sprintf("line %d, column %d", line, col)
}

// plainJSONErr drops the "json: " prefix of decoder errors.
func plainJSONErr(err error) string {
	if err == nil {
		return ""
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
