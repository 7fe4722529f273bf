package proxy_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/proxy"
	"github.com/ctxmgr/ctxmgr/store"
)

// A program that embeds the proxy adjusts the configuration of the context manager the proxy
// makes for each model: here it declares its agent's own file-reading tool (its results are
// then capped only as a requested read) and exempts a tool whose results must never be cut.
func ExampleConfig_tune() {
	srv, err := proxy.New(proxy.Config{
		UpstreamAnthropic: "https://api.anthropic.com",
		Store:             store.NewMemory(),
		Tune: func(c *ctxmgr.Config) {
			c.ReadTools = append(c.ReadTools, ctxmgr.ReadTool{Name: "open_document", PathArg: "path", StartArg: "from", EndArg: "to"})
			c.ExemptTools = append(c.ExemptTools, "get_credentials_policy")
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler()) // or http.ListenAndServe(addr, srv.Handler())
	defer ts.Close()
	fmt.Println("serving")
	// Output: serving
}
