package serveconfig

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLimitsReadTimeoutSparesLongAnswers: the read timeout bounds reading the request, not
// the answer: a stream that runs past it keeps its context and completes, for requests with
// a body and without.
func TestLimitsReadTimeoutSparesLongAnswers(t *testing.T) {
	addr := serveLimits(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 8; i++ {
			if err := r.Context().Err(); err != nil {
				fmt.Fprintf(w, "data: canceled %v\n\n", err)
				return
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond)
		}
	}), Limits{ReadTimeout: 150 * time.Millisecond, WriteTimeout: time.Second})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(method, "http://"+addr+"/", strings.NewReader(strings.Repeat("x", 100)))
		if method == http.MethodGet {
			req.Body = http.NoBody
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(b), "data: 7") {
			t.Errorf("%s: a 480 ms stream under a 150 ms read timeout: %q %v", method, b, err)
		}
	}
}
