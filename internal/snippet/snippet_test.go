package snippet

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

func TestCutRuneSafe(t *testing.T) {
	orig := chat.ToolResult("c", "t", strings.Repeat("日本語テキスト", 3000), false)
	v := Cut(&orig, store.Offloaded{Location: "x", Bytes: 63000, Lines: 1}, 2000, nil)
	if !utf8.ValidString(v.Text()) || len(v.Text()) > 2000 {
		t.Fatalf("snippet invalid UTF-8 or too long (%d)", len(v.Text()))
	}
}

// A snippet keeps head, tail, the failure in the omitted middle with its line number, and a
// reference that says which lines it omits and where the full text is.
func TestCutKeepsNotableLines(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 2000; i++ {
		if i == 1000 {
			b.WriteString("--- FAIL: TestParse (0.00s)\n")
			continue
		}
		fmt.Fprintf(&b, "ok   pkg/case_%d\n", i)
	}
	orig := chat.ToolResult("c", "bash", b.String(), false)
	off := store.Offloaded{Location: "mem://s/k", Bytes: b.Len(), Lines: 2000}
	v := Cut(&orig, off, 3000, nil)
	got := v.Text()
	for _, want := range []string{"ok   pkg/case_1\n", "ok   pkg/case_2000\n", "L1000: --- FAIL: TestParse (0.00s)", off.Ref(), "2000 lines in all"} {
		if !strings.Contains(got, want) {
			t.Errorf("snippet lacks %q:\n%s", want, got)
		}
	}
	if len(got) > 3000 {
		t.Errorf("snippet of %d bytes above its cap of 3000", len(got))
	}
}

func TestText(t *testing.T) {
	m := chat.Message{Role: chat.RoleTool, Content: []chat.Part{
		{Type: chat.PartText, Text: "a"}, {Type: chat.PartImage, Image: &chat.Image{URL: "u"}}, {Type: chat.PartText, Text: "b"}}}
	if got := Text(&m); got != "a\n[image]\nb" {
		t.Fatalf("Text = %q", got)
	}
}
