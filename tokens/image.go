package tokens

import (
	"encoding/base64"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// imageTokens is the cost of an image part under the options' rule.
func imageTokens(im *chat.Image, o Options) int {
	if im == nil {
		return o.unknownImage()
	}
	if o.Images == ImagesFlat {
		return o.unknownImage()
	}
	if o.Images == ImagesOpenAI && strings.EqualFold(im.Detail, "low") {
		return openAILowDetail
	}
	w, h := im.Width, im.Height
	if w <= 0 || h <= 0 {
		w, h = imageSize(im)
	}
	if w <= 0 || h <= 0 {
		return o.unknownImage()
	}
	switch o.Images {
	case ImagesAnthropic:
		return AnthropicImageTokens(w, h)
	default:
		return OpenAIImageTokens(w, h, im.Detail)
	}
}

const (
	openAILowDetail = 85
	openAIPerTile   = 170
)

// OpenAIImageTokens is OpenAI's cost of a w x h image at the given detail ("low", "high",
// "auto" or ""): "low" is 85 tokens; otherwise the image is scaled down to fit within
// 2048x2048, then down so that its shortest side is at most 768 pixels, and costs 85 + 170 per
// 512-pixel tile. "auto" is counted as "high", which errs high. Non-positive dimensions count
// as DefaultUnknownImageTokens.
func OpenAIImageTokens(w, h int, detail string) int {
	if strings.EqualFold(detail, "low") {
		return openAILowDetail
	}
	if w <= 0 || h <= 0 {
		return DefaultUnknownImageTokens
	}
	fw, fh := float64(w), float64(h)
	if fw > 2048 || fh > 2048 {
		s := 2048 / math.Max(fw, fh)
		fw, fh = fw*s, fh*s
	}
	if short := math.Min(fw, fh); short > 768 {
		s := 768 / short
		fw, fh = fw*s, fh*s
	}
	// Round the scaled sides before tiling, as pixel sizes are integers; at least 1 pixel.
	tw := math.Ceil(math.Max(1, math.Floor(fw+0.5)) / 512)
	th := math.Ceil(math.Max(1, math.Floor(fh+0.5)) / 512)
	return openAILowDetail + openAIPerTile*int(tw*th)
}

// AnthropicImageTokens is Anthropic's cost of a w x h image: scaled down so that its long edge
// is at most 1568 pixels, it costs width*height/750 tokens, rounded up. Non-positive dimensions
// count as DefaultUnknownImageTokens.
func AnthropicImageTokens(w, h int) int {
	if w <= 0 || h <= 0 {
		return DefaultUnknownImageTokens
	}
	fw, fh := float64(w), float64(h)
	if long := math.Max(fw, fh); long > 1568 {
		s := 1568 / long
		fw, fh = math.Max(1, math.Floor(fw*s+0.5)), math.Max(1, math.Floor(fh*s+0.5))
	}
	return int(math.Ceil(fw * fh / 750))
}

// imageSize reads the dimensions of inline image data (chat.Image.Data, or a base64 data URL)
// from its PNG, JPEG or GIF header. Only the header is decoded. It returns zeros when the data
// is absent, not base64, or of another format.
func imageSize(im *chat.Image) (int, int) {
	data := im.Data
	if data == "" && strings.HasPrefix(im.URL, "data:") {
		if i := strings.Index(im.URL, ";base64,"); i >= 0 {
			data = im.URL[i+len(";base64,"):]
		}
	}
	if data == "" {
		return 0, 0
	}
	var dec func(io.Reader) (image.Config, error)
	switch {
	case strings.HasPrefix(data, "iVBORw0KGgo"): // \x89PNG\r\n\x1a\n
		dec = png.DecodeConfig
	case strings.HasPrefix(data, "/9j/"): // \xff\xd8\xff
		dec = jpeg.DecodeConfig
	case strings.HasPrefix(data, "R0lGOD"): // GIF8
		dec = gif.DecodeConfig
	default:
		return 0, 0
	}
	// Header decoders read little; the limit keeps a JPEG with a huge EXIF block from
	// decoding megabytes of base64.
	const maxHeader = 1 << 20
	r := base64.NewDecoder(base64.StdEncoding, io.LimitReader(strings.NewReader(data), maxHeader))
	cfg, err := dec(r)
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0
	}
	return cfg.Width, cfg.Height
}
