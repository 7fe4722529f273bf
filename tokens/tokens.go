// Package tokens counts what a request costs in a model's context window.
//
// Why: every decision the context manager makes (what fits, what to cut, when to compact) is a
// decision in tokens, and a count that comes out low means a provider refuses the request. The
// package therefore counts the neutral model of package chat, not raw text: each message with
// its framing, the tool definitions, the tool calls and results, reasoning, images.
//
// Contract:
//
//   - Every Counter is safe for concurrent use and never panics, whatever the input (empty
//     strings, invalid UTF-8, huge strings, nil messages, malformed JSON in tool definitions).
//   - Text("") is 0; Text of a non-empty string is at least 1; counts are deterministic.
//   - For OpenAI encodings (ForEncoding, ForModel) Text is the exact BPE count of the text with
//     special-token strings such as "<|endoftext|>" encoded as ordinary text (they are user
//     data, not control tokens). The vocabularies are embedded in the binary: nothing is
//     downloaded at run time. The exact counts are proven against the repository's
//     testdata/golden/token-counts.jsonl by the package's tests. The one deliberate
//     exception is a text holding a run of more than 512 bytes of one character class (a
//     base64 blob of zeros, a line of 100 000 "="): BPE costs time quadratic in the length of
//     such a run, so it is counted in slices, which keeps the time linear and errs high by at
//     most about a token a 512-byte slice (under 1% in the tests; see bpe.go). Invalid UTF-8
//     bytes count as U+FFFD each, as tiktoken counts them. Pre-tokenization is ours (pretok.go,
//     fuzzed against tiktoken's own patterns); the vocabulary and merges are the library's.
//   - Message, Tools and Request add the framing of the OpenAI cookbook ("How to count tokens
//     with tiktoken"): TokensPerMessage a message plus the tokens of its role, TokensPerName
//     more when a name is set, ReplyPriming a request. Constants that the cookbook does not
//     give (tool calls, tool definitions) are chosen to err high; see their comments. On the
//     cookbook's example the framing reproduces the API's reported 124 (o200k_base) and 129
//     (cl100k_base) prompt tokens.
//   - For other models (Anthropic, Gemini, ...) NewHeuristic estimates from character classes,
//     and a Calibrator learns the ratio between that estimate and the provider's reported usage
//     per model, adding a safety margin so that the estimate errs high.
//   - NewCache wraps any Counter with a bounded, concurrent-safe per-message cache keyed by
//     chat.Message.Hash, so that recounting a long session costs a hash per message plus the
//     count of its new messages.
package tokens

import (
	"errors"
	"math"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Counter counts tokens. Implementations are safe for concurrent use.
type Counter interface {
	// Name names the counting method, e.g. "o200k_base", "heuristic", "calibrated(heuristic)".
	Name() string
	// Text returns the tokens of plain text.
	Text(s string) int
	// Message returns the tokens one message costs inside a request, framing included.
	Message(m *chat.Message) int
	// Tools returns the tokens of the tool definitions (0 for none).
	Tools(tools []chat.Tool) int
	// Request returns the cost of a whole request: system + tools + messages + reply priming.
	Request(r *chat.Request) Breakdown
}

// Breakdown is the cost of a request by region. Total is the sum of the others.
type Breakdown struct {
	System   int   `json:"system"`
	Tools    int   `json:"tools"`
	Messages []int `json:"messages"`
	Priming  int   `json:"priming"`
	Total    int   `json:"total"`
}

// Errors. Constructors wrap them with the offending name; test with errors.Is.
var (
	// ErrUnknownEncoding: ForEncoding was given an encoding it has no vocabulary for.
	ErrUnknownEncoding = errors.New("tokens: unknown encoding")
	// ErrUnknownModel: ForModel was given a model that is not an OpenAI model with a known
	// encoding. Use NewHeuristic (and a Calibrator) for those.
	ErrUnknownModel = errors.New("tokens: unknown model")
)

// Framing constants. The first three are the OpenAI cookbook's figures for every current chat
// model; the others are ours and err high.
const (
	// TokensPerMessage is the fixed cost of one message (<|start|>, the role separator,
	// <|end|>), on top of the tokens of the role string and the content.
	TokensPerMessage = 3
	// TokensPerName is added when a message has a name (the name's own tokens are counted too).
	TokensPerName = 1
	// ReplyPriming is added once per request: every reply is primed with
	// <|start|>assistant<|message|>.
	ReplyPriming = 3
	// ToolCallOverhead is added per tool call on top of the tokens of the function name and the
	// arguments text. The cookbook gives no figure; the most a call can cost is being rendered
	// as an assistant turn of its own, "<|start|>assistant<|channel|>commentary
	// to=functions.NAME <|constrain|>json<|message|>ARGUMENTS<|call|>", 12 tokens besides the
	// name and the arguments under both encodings. Call ids are not rendered to the model and
	// are not counted on the call; the result message counts its tool_call_id.
	ToolCallOverhead = 12
	// ToolsOverhead is added once when a request offers any tools: the definitions are rendered
	// into the system prompt inside a wrapper ("# Tools\n\n## functions\n\nnamespace
	// functions {\n\n} // namespace functions"), 13 tokens under o200k_base and cl100k_base,
	// rounded up to 16.
	ToolsOverhead = 16
	// PerToolOverhead is added per tool definition on top of its name, description and the
	// JSON of its parameters. The rendering wraps each function in "// DESCRIPTION\ntype NAME =
	// (_: {\n...}) => any;\n\n", 12 tokens of punctuation under both encodings. The
	// parameters are counted as compact JSON, which costs more than the TypeScript-like
	// rendering the provider actually uses, so the total errs high.
	PerToolOverhead = 12
)

// ImageRule says how an image part is counted.
type ImageRule int

const (
	// ImagesOpenAI uses OpenAI's tile formula: detail "low" costs 85 tokens; otherwise the
	// image is fitted within 2048x2048, scaled down so that its shortest side is at most 768,
	// and costs 85 + 170 per 512x512 tile. This is the default.
	ImagesOpenAI ImageRule = iota
	// ImagesAnthropic uses Anthropic's formula: the image is scaled down so that its long edge
	// is at most 1568 pixels and costs width*height/750 tokens, rounded up.
	ImagesAnthropic
	// ImagesFlat counts every image as Options.UnknownImageTokens.
	ImagesFlat
)

// DefaultUnknownImageTokens is what an image costs when its dimensions are unknown (neither
// set on chat.Image nor readable from the PNG, JPEG or GIF header of inline data): 1000 tokens,
// above OpenAI's 765 for a square high-detail image and Anthropic's ~1100 for the 1092x1092
// square their documentation uses, below the worst cases (OpenAI 1445 for a tall image,
// Anthropic ~1600 at their 1.15 megapixel limit). Set Options.UnknownImageTokens to be
// stricter.
const DefaultUnknownImageTokens = 1000

// DefaultUnknownFileTokens is what a non-text file part (a PDF, say) costs; set
// Options.UnknownFileTokens to change it. Text files (text/*, JSON, XML, or data without a
// media type that is not base64) are counted as their text.
const DefaultUnknownFileTokens = 1000

// Options configures the parts of counting that are not text: images and files. The zero
// value is the default: OpenAI's image rule and the flat figures above.
type Options struct {
	// Images chooses the image formula.
	Images ImageRule
	// UnknownImageTokens is the flat cost of an image of unknown size (0: DefaultUnknownImageTokens).
	UnknownImageTokens int
	// UnknownFileTokens is the flat cost of a non-text file part (0: DefaultUnknownFileTokens).
	UnknownFileTokens int
}

func (o Options) unknownImage() int {
	if o.UnknownImageTokens > 0 {
		return o.UnknownImageTokens
	}
	return DefaultUnknownImageTokens
}

func (o Options) unknownFile() int {
	if o.UnknownFileTokens > 0 {
		return o.UnknownFileTokens
	}
	return DefaultUnknownFileTokens
}

// satAdd adds non-negative counts without overflowing.
func satAdd(a, b int) int {
	if b > 0 && a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
