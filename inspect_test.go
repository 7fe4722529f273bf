package ctxmgr

import (
	"context"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Views shows each message as the next request holds it: an offloaded result's snippet with
// where its full text is, originals as appended, and after a compaction the archived ones,
// without a view; it runs no step.
func TestViews(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 4000})
	big := lines(2000, "output line")
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call("c1"), chat.ToolResult("c1", "bash", big, false),
		chat.TextMessage(chat.RoleAssistant, "done"), chat.TextMessage(chat.RoleUser, "next"))
	vs := s.Views()
	if len(vs) != 5 {
		t.Fatalf("%d views", len(vs))
	}
	if v := vs[2]; v.State != "offloaded" || v.Offload == nil || v.Offload.Lines != 2000 || len(v.View.Text()) > 4000 || v.Tokens == 0 {
		t.Errorf("the offloaded result: %+v", v.Offload)
	}
	if v := vs[4]; v.State != "original" || v.View.Text() != "next" || v.Role != chat.RoleUser {
		t.Errorf("the latest message: %+v", v)
	}
	before := s.Stats()
	if after := s.Stats(); after.Input != before.Input {
		t.Errorf("Views changed the session: %d -> %d", before.Input, after.Input)
	}
	if _, err := s.CompactAll(ctx, ""); err != nil {
		t.Fatal(err)
	}
	archived := 0
	for _, v := range s.Views() {
		if v.State == StateArchived {
			archived++
			if v.Tokens != 0 || v.Offload != nil || len(v.View.Content) != 0 {
				t.Errorf("an archived message has a view: %+v", v)
			}
		}
	}
	if archived < 4 || s.Summary() == nil {
		t.Errorf("%d archived after /compact", archived)
	}
}
