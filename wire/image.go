package wire

import (
	"bytes"
	"encoding/base64"
	"image"
	_ "image/gif"  // register GIF for image.DecodeConfig
	_ "image/jpeg" // register JPEG
	_ "image/png"  // register PNG
	"strings"
)

// parseDataURL splits "data:<media type>;base64,<data>".
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, found = strings.CutSuffix(meta, ";base64")
	if !found {
		return "", "", false
	}
	return mediaType, data, true
}

// imageSize reads the dimensions from the header of a base64 image (PNG, JPEG, GIF). It decodes
// only a prefix where that suffices; zero means unknown.
func imageSize(b64 string) (w, h int) {
	for _, n := range []int{4096, len(b64)} {
		if n > len(b64) {
			n = len(b64)
		}
		n -= n % 4
		raw, err := base64.StdEncoding.DecodeString(b64[:n])
		if err != nil && n == len(b64) {
			raw, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
		}
		if err != nil {
			continue
		}
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil {
			return cfg.Width, cfg.Height
		}
		if n == len(b64) {
			break
		}
	}
	return 0, 0
}
