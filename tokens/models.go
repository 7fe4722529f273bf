package tokens

import "strings"

// modelEncodings maps exact model names (after normalization) to their encoding.
var modelEncodings = map[string]string{
	"gpt-4o":                 O200kBase,
	"gpt-4.1":                O200kBase,
	"gpt-4.5":                O200kBase,
	"gpt-5":                  O200kBase,
	"o1":                     O200kBase,
	"o3":                     O200kBase,
	"o4":                     O200kBase,
	"chatgpt-4o-latest":      O200kBase,
	"gpt-4":                  CL100kBase,
	"gpt-3.5-turbo":          CL100kBase,
	"gpt-3.5":                CL100kBase,
	"text-embedding-ada-002": CL100kBase,
	"text-embedding-3-small": CL100kBase,
	"text-embedding-3-large": CL100kBase,
}

// modelPrefixes maps name prefixes to encodings, longest and most specific first: "gpt-4o"
// must win over "gpt-4".
var modelPrefixes = []struct{ prefix, enc string }{
	{"gpt-4o", O200kBase},
	{"gpt-4.1", O200kBase},
	{"gpt-4.5", O200kBase},
	{"gpt-5", O200kBase},
	{"gpt-oss", O200kBase},
	{"chatgpt-4o", O200kBase},
	{"o1-", O200kBase},
	{"o3-", O200kBase},
	{"o4-", O200kBase},
	{"gpt-4", CL100kBase},
	{"gpt-3.5", CL100kBase},
	{"text-embedding-3", CL100kBase},
	{"text-embedding-ada-002", CL100kBase},
}

// EncodingForModel returns the encoding of an OpenAI model name. It accepts exact names
// ("gpt-4o", "o3"), dated and suffixed variants by prefix ("gpt-4o-2024-08-06",
// "gpt-4.1-mini", "gpt-5-codex", "o4-mini", "gpt-oss-120b"), provider prefixes
// ("openai/gpt-4o", "azure/gpt-4o"), fine-tuned names ("ft:gpt-4o-mini:org::id") and Azure's
// spelling "gpt-35-turbo". Names are matched case-insensitively. It reports false for models
// that are not OpenAI's (claude-*, gemini-*, ...).
func EncodingForModel(model string) (string, bool) {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if rest, ok := strings.CutPrefix(m, "ft:"); ok {
		m = rest
		if i := strings.IndexByte(m, ':'); i >= 0 {
			m = m[:i]
		}
	}
	if rest, ok := strings.CutPrefix(m, "gpt-35"); ok {
		m = "gpt-3.5" + rest
	}
	if enc, ok := modelEncodings[m]; ok {
		return enc, true
	}
	for _, p := range modelPrefixes {
		if strings.HasPrefix(m, p.prefix) {
			return p.enc, true
		}
	}
	return "", false
}
