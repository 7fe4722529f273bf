// Command fakeupstream serves the fake OpenAI and Anthropic upstream of package
// internal/fakeupstream for the end-to-end script: it records every request it receives (with its
// exact o200k_base token count, max tokens, and the real-API rule it broke if any: see the
// package doc of internal/fakeupstream) as one JSON line in -log, and writes the address it listens
// on to -addr-file. With -thinking it issues signed thinking blocks to Anthropic requests that
// ask for thinking, and refuses them altered.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	addrFile := flag.String("addr-file", "", "write the address listened on to this file")
	logPath := flag.String("log", "", "append one JSON record per request to this file")
	window := flag.Int("window", 0, "reject requests whose tokens + max tokens exceed this with the overflow error (0: no limit)")
	rejectAbove := flag.Int("reject-above", 0, "reject requests whose input tokens exceed this with the overflow error (0: no limit)")
	bodies := flag.Bool("bodies", false, "record request bodies")
	thinking := flag.Bool("thinking", false, "issue signed thinking blocks when an Anthropic request asks for thinking, and enforce thinking-first in tool loops")
	providerContext := flag.String("provider-context", "", "the providers' own context management: native (implemented), non-native (refused as upstreams without it do), or empty (accepted, ignored)")
	flag.Parse()

	opts := fakeupstream.Options{Window: *window, RejectAbove: *rejectAbove, KeepBodies: *bodies, Thinking: *thinking, ProviderContext: *providerContext}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		opts.Log = f
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()+"\n"), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "fakeupstream: listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: fakeupstream.New(opts)}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM)
		<-c
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
