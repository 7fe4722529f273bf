package ctxmgr

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

func TestEachIdentifier(t *testing.T) {
	var got []string
	eachIdentifier("see src/a.py:12, parse_config and getUserName; not word or 1 x.", func(s string) { got = append(got, s) })
	want := []string{"src/a.py:12", "parse_config", "getUserName"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A snippet keeps the omitted lines that hold identifiers the conversation uses.
func TestSnippetKeepsLinesInPlay(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 2000; i++ {
		if i == 1000 {
			b.WriteString("    def resolve_session_42(self, token):\n")
			continue
		}
		fmt.Fprintf(&b, "    value_%d = compute(%d)\n", i%7, i)
	}
	orig := chat.ToolResult("c", "Read", b.String(), false)
	off := store.Offloaded{Location: "mem://x", Bytes: b.Len(), Lines: 2000}
	var st supState
	st.addTerms("I will look at resolve_session_42 in src/auth.py")
	wv := snippetViewKeeping(&orig, off, 3000, st.inPlay)
	pv := snippetView(&orig, off, 3000)
	with, without := wv.Text(), pv.Text()
	if !strings.Contains(with, "L1000:     def resolve_session_42") {
		t.Fatalf("line in play not kept:\n%s", with)
	}
	if strings.Contains(without, "resolve_session_42") {
		t.Fatal("the plain snippet keeps the line too: the test proves nothing")
	}
	if len(with) > 3100 {
		t.Fatalf("snippet of %d bytes above its cap", len(with))
	}
}
