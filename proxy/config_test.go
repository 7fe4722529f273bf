package proxy

import (
	"errors"
	"testing"

	ctxmgr "github.com/ctxmgr/ctxmgr"
)

// Every invalid Config field is reported as a *ConfigError naming it, and wraps
// ctxmgr.ErrInvalidConfig; a negative number is refused, never taken for "off".
func TestConfigErrors(t *testing.T) {
	up := "http://127.0.0.1:1"
	cases := []struct {
		field string
		cfg   Config
	}{
		{"UpstreamOpenAI", Config{}},
		{"UpstreamAnthropic", Config{UpstreamAnthropic: "ftp://x"}},
		{"Preset", Config{UpstreamOpenAI: up, Preset: "nope"}},
		{"Routes[0].Format", Config{Routes: []Route{{ModelPrefix: "l", Format: "x", URL: up}}}},
		{"Routes[1].URL", Config{Routes: []Route{{Format: FormatOpenAI, URL: up}, {Format: FormatOpenAI, URL: "nohost"}}}},
		{"Models[0]", Config{UpstreamOpenAI: up, Models: []ModelLimits{{Prefix: "m"}}}},
		{`ProviderContext["*"]`, Config{UpstreamOpenAI: up, ProviderContext: map[string]ProviderContextMode{"*": "sometimes"}}},
		{"Window", Config{UpstreamOpenAI: up, Window: -1}},
		{"MaxOutput", Config{UpstreamOpenAI: up, MaxOutput: -1}},
		{"DecodeCacheBytes", Config{UpstreamOpenAI: up, DecodeCacheBytes: -1}},
		{"CutThroughBytes", Config{UpstreamOpenAI: up, CutThroughBytes: -1}},
		{"MaxBodyBytes", Config{UpstreamOpenAI: up, MaxBodyBytes: -1}},
		{"UpstreamTimeout", Config{UpstreamOpenAI: up, UpstreamTimeout: -1}},
		{"MaxSessions", Config{UpstreamOpenAI: up, MaxSessions: -1}},
		{"MaxReads", Config{UpstreamOpenAI: up, MaxReads: -1}},
	}
	for _, c := range cases {
		c.cfg.Logger = quietLogger()
		srv, err := New(c.cfg)
		if err == nil {
			srv.Close()
			t.Errorf("%s: accepted", c.field)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ctxmgr.ErrInvalidConfig) {
			t.Errorf("%s: got %v (%T), want a *ConfigError on %s wrapping ctxmgr.ErrInvalidConfig", c.field, err, err, c.field)
		}
	}
	// A Transport needs no upstream, and refuses the same negatives.
	if _, err := NewTransport(Config{CutThroughBytes: -1, Logger: quietLogger()}); !errors.As(err, new(*ConfigError)) {
		t.Errorf("NewTransport with CutThroughBytes -1: %v", err)
	}
}

// The switches turn the decode cache and cut-through forwarding off; a Transport forwards
// cut-through only when CutThroughBytes is set.
func TestConfigSwitches(t *testing.T) {
	const body = 1 << 20
	for _, c := range []struct {
		name          string
		cfg           Config
		transport     bool
		cut, decoding bool
	}{
		{"server defaults", Config{}, false, true, true},
		{"server, cut-through off", Config{DisableCutThrough: true}, false, false, true},
		{"server, decode cache off", Config{DisableDecodeCache: true, DecodeCacheBytes: 1 << 20}, false, true, false},
		{"transport defaults", Config{}, true, false, true},
		{"transport with a size", Config{CutThroughBytes: 64 << 10}, true, true, true},
		{"transport, size and off", Config{CutThroughBytes: 64 << 10, DisableCutThrough: true}, true, false, true},
	} {
		c.cfg.Logger = quietLogger()
		var srv *Server
		if c.transport {
			tr, err := NewTransport(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			srv = tr.Server()
		} else {
			c.cfg.UpstreamOpenAI = "http://127.0.0.1:1"
			s, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv = s
		}
		if got := srv.cutsThrough(body); got != c.cut {
			t.Errorf("%s: cuts through a %d-byte body: %v, want %v", c.name, body, got, c.cut)
		}
		if got := srv.decodes.limit > 0; got != c.decoding {
			t.Errorf("%s: decode cache on: %v (limit %d), want %v", c.name, got, srv.decodes.limit, c.decoding)
		}
	}
}
