package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// maxInput is the largest input (per file, or stdin) the tokens command reads: 256 MiB.
// A variable so that tests can lower it.
var maxInput int64 = 256 << 20

// tokensOptions holds the flags of the tokens command.
type tokensOptions struct {
	model     string
	encoding  string
	heuristic bool
	messages  bool
	format    string
}

func newTokensCmd() *cobra.Command {
	var o tokensOptions
	cmd := &cobra.Command{
		Use:   "tokens [--model NAME | --encoding NAME] [--heuristic] [--messages [--format F]] [FILE...]",
		Short: "Count the tokens of text or of a chat request",
		Long: `Count the tokens of text, or of a chat request with --messages.

Input is read from each FILE, or from standard input when there is none ("-" also
means standard input). With one input the count alone is printed; with several,
one "N<TAB>FILE" line each and a "N<TAB>total" line, like wc. Each input is
limited to 256 MiB.

Counts are exact: the BPE of the OpenAI encoding, o200k_base by default. Choose
the encoding with --encoding (o200k_base, cl100k_base) or let --model pick it
(gpt-4o, gpt-4.1, gpt-5, o3, ... use o200k_base; gpt-4 and gpt-3.5-turbo use
cl100k_base; dated and suffixed names such as gpt-4o-2024-08-06 work too).

The tokenizers of other providers' models (claude-*, gemini-*, ...) are not
public, so such a --model is refused unless --heuristic is given: --heuristic
counts with a character-class heuristic instead, an ESTIMATE that is not exact
and aims to err high (for any model, and with no --model at all).

Plain text need not be valid UTF-8: invalid bytes are counted as the encoder
sees them (byte-level BPE), not rejected or replaced.

With --messages the input is a chat request body (OpenAI chat completions,
Anthropic messages, OpenAI Responses or Gemini generateContent) or a bare JSON
array of OpenAI messages. The format is
detected (override with --format) and the messages are validated; the tokens
are printed as JSON, framing included:

  {"system":N,"tools":N,"messages":[N,...],"priming":N,"total":N,
   "model":"...","counter":"o200k_base","estimate":false}

"messages" has one entry per message of the neutral model, tool results
counted as messages of their own (Anthropic tool_result blocks included);
"priming" is the reply priming every request costs. The tokenizer is the one
of the body's "model" (--model, --encoding or --heuristic override it): an
OpenAI model is counted exactly; a model whose tokenizer is not public
(claude-*, gemini-*, ...) or an unknown one is counted with the heuristic or
o200k_base and marked "estimate":true. A --format that the body contradicts
(an Anthropic top-level "system" under --format openai, say), a body without
messages, malformed JSON and invalid messages fail with an error naming the
message index and the field.

Inputs of several megabytes take seconds (about 3 MB/s of ordinary text); on a
terminal, a line on stderr says what is being counted meanwhile.`,
		Example: `  echo "hello world" | ctxmgr tokens
  ctxmgr tokens --model gpt-4 README.md docs/*.md
  ctxmgr tokens --messages request.json
  ctxmgr tokens --model claude-sonnet-4-5 --heuristic --messages body.json`,
		Args:                  cobra.ArbitraryArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTokens(cmd, &o, args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.model, "model", "m", "", "count with the encoding of this OpenAI model (e.g. gpt-4o, gpt-4)")
	f.StringVarP(&o.encoding, "encoding", "e", "", `count with this encoding: `+strings.Join(tokens.Encodings(), ", ")+` (default "`+tokens.O200kBase+`")`)
	f.BoolVar(&o.heuristic, "heuristic", false, "estimate with a heuristic instead of an exact tokenizer (for non-OpenAI models); not exact")
	f.BoolVar(&o.messages, "messages", false, "the input is a chat request body or message array; print a JSON breakdown")
	f.StringVar(&o.format, "format", "", "with --messages: the wire format, openai, anthropic, responses or gemini (default: detected)")
	return cmd
}

func runTokens(cmd *cobra.Command, o *tokensOptions, args []string) error {
	if o.model != "" && o.encoding != "" {
		return usageErrorf("--model and --encoding are mutually exclusive")
	}
	if o.heuristic && o.encoding != "" {
		return usageErrorf("--heuristic and --encoding are mutually exclusive")
	}
	var format wire.Format
	if o.format != "" {
		if !o.messages {
			return usageErrorf("--format needs --messages")
		}
		switch f := wire.Format(strings.ToLower(o.format)); f {
		case wire.OpenAI, wire.Anthropic, wire.Responses, wire.Gemini:
			format = f
		default:
			return usageErrorf("invalid --format %q: want %s, %s, %s or %s", o.format, wire.OpenAI, wire.Anthropic, wire.Responses, wire.Gemini)
		}
	}
	if o.messages && len(args) > 1 {
		return usageErrorf("--messages takes at most one FILE, got %d", len(args))
	}

	stdin, stdout, stderr := cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.messages {
		name := "-"
		if len(args) == 1 {
			name = args[0]
		}
		body, err := readInput(name, stdin)
		if err != nil {
			return err
		}
		stop := showCounting(stderr, len(body))
		out, err := countMessages(o, body, format)
		stop()
		if err != nil {
			return err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}

	counter, err := newCounter(o)
	if err != nil {
		return err
	}

	if len(args) <= 1 {
		name := "-"
		if len(args) == 1 {
			name = args[0]
		}
		text, err := readInput(name, stdin)
		if err != nil {
			return err
		}
		stop := showCounting(stderr, len(text))
		n := counter.Text(string(text))
		stop()
		_, err = fmt.Fprintln(stdout, n)
		return err
	}

	// Several inputs: like wc, report a failing input and go on with the others.
	total, failed := 0, false
	for _, name := range args {
		text, err := readInput(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "ctxmgr: %v\n", err)
			failed = true
			continue
		}
		stop := showCounting(stderr, len(text))
		n := counter.Text(string(text))
		stop()
		total += n
		if _, err := fmt.Fprintf(stdout, "%d\t%s\n", n, name); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(stdout, "%d\ttotal\n", total); err != nil {
		return err
	}
	if failed {
		return errReported
	}
	return nil
}

// nonOpenAIPrefixes are model families whose tokenizer is not public (or not embedded), for a
// clearer error than "unknown model".
var nonOpenAIPrefixes = []string{
	"claude", "anthropic", "gemini", "gemma", "palm", "llama", "meta-llama", "mistral", "mixtral",
	"codestral", "command", "deepseek", "qwen", "grok", "phi", "yi-", "glm", "kimi",
}

// newCounter picks the counter the options ask for.
func newCounter(o *tokensOptions) (tokens.Counter, error) {
	if o.heuristic {
		var ho tokens.HeuristicOptions
		if isAnthropicModel(o.model) {
			ho.Images = tokens.ImagesAnthropic
		}
		return tokens.NewHeuristic(ho), nil
	}
	if o.model != "" {
		c, err := tokens.ForModel(o.model)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, tokens.ErrUnknownModel) {
			return nil, err
		}
		encs := strings.Join(tokens.Encodings(), " or ")
		if isNonOpenAIModel(o.model) {
			return nil, fmt.Errorf("%w %q: not an OpenAI model, and its tokenizer is not available for an exact count; "+
				"pass --heuristic for an estimate, or --encoding %s instead of --model to count with an OpenAI encoding",
				tokens.ErrUnknownModel, o.model, encs)
		}
		return nil, fmt.Errorf("%w %q: no known encoding for it; pass --encoding %s instead of --model, "+
			"or --heuristic for an estimate", tokens.ErrUnknownModel, o.model, encs)
	}
	enc := o.encoding
	if enc == "" {
		enc = tokens.O200kBase
	}
	return tokens.ForEncoding(enc) // ErrUnknownEncoding names the known encodings
}

// modelBase lower-cases a model name and strips a provider prefix ("anthropic/claude-...").
func modelBase(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	return m
}

func isAnthropicModel(model string) bool {
	return strings.HasPrefix(modelBase(model), "claude") ||
		strings.HasPrefix(strings.ToLower(strings.TrimSpace(model)), "anthropic")
}

func isNonOpenAIModel(model string) bool {
	full := strings.ToLower(strings.TrimSpace(model))
	base := modelBase(model)
	for _, p := range nonOpenAIPrefixes {
		if strings.HasPrefix(base, p) || strings.HasPrefix(full, p) {
			return true
		}
	}
	return false
}

// readInput reads a file, or stdin for "-", refusing anything over maxInput bytes.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	label := "standard input"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, label = f, name
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", label, err)
	}
	if int64(len(data)) > maxInput {
		return nil, fmt.Errorf("%s: input too large: more than %s", label, formatBytes(maxInput))
	}
	return data, nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// countRequest decodes a request body in format f (detected when empty), validates its
// messages and counts it. Decoding and validation errors are *chat.Error values whose Index
// is the index in the body's message array.
func countRequest(c tokens.Counter, body []byte, f wire.Format) (tokens.Breakdown, error) {
	if f == "" {
		f = wire.Detect(body)
	}
	r, err := wire.Decode(f, body)
	if err != nil {
		return tokens.Breakdown{}, err
	}
	if err := validateRequest(f, r); err != nil {
		return tokens.Breakdown{}, err
	}
	b := c.Request(r)
	if b.Messages == nil {
		b.Messages = []int{}
	}
	return b, nil
}

// validateRequest runs chat.Validate over a decoded request and reports indices as the wire
// numbers them: an OpenAI body's leading system messages were moved to Request.System, and an
// Anthropic user message may have been split into several neutral messages (JoinPrev).
func validateRequest(f wire.Format, r *chat.Request) error {
	if f == wire.OpenAI {
		all := make([]chat.Message, 0, len(r.System)+len(r.Messages))
		all = append(all, r.System...)
		all = append(all, r.Messages...)
		return chat.Validate(all)
	}
	err := chat.Validate(r.Messages)
	var ce *chat.Error
	if err == nil || !errors.As(err, &ce) || ce.Index < 0 || ce.Index >= len(r.Messages) {
		return err
	}
	wireIndex := -1
	for i := 0; i <= ce.Index; i++ {
		if i == 0 || !r.Messages[i].JoinPrev {
			wireIndex++
		}
	}
	mapped := *ce
	mapped.Index = wireIndex
	return &mapped
}
