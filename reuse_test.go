package ctxmgr

import (
	"math"
	"strings"
	"testing"
)

// The outlook of removing part of an old result: a chance in [0, 1] that grows with the calls
// to come, and the calls the saving holds, at most those calls and fewer the likelier the
// agent is to look back. A page of a document read in order keeps its hazard; a command's
// output is used less and less as later results arrive, so over many calls it is likelier
// to be left alone than a page with the same hazard now.
func TestOutlook(t *testing.T) {
	var r reuseState
	text := strings.Repeat("line with some_identifier_12 and more text\n", 100)
	r.onResult(10, text, toolAction{tool: "bash", kind: actCommand}, false, 0, 0)
	r.onResult(12, text, toolAction{tool: "Read", kind: actRead}, true, 0, 0)
	for k := 0; k < 5; k++ { // five later results: both are old
		r.onResult(20+k, "ok", toolAction{tool: "bash", kind: actCommand}, false, 0, 0)
	}
	prev := outlook{}
	for _, rem := range []float64{3, 10, 100, 1000} {
		cmd, _ := r.outlook(10, toolAction{tool: "bash", kind: actCommand}, rem)
		page, _ := r.outlook(12, toolAction{tool: "Read", kind: actRead}, rem)
		for _, o := range []outlook{cmd, page} {
			if o.chance < 0 || o.chance > 1 || o.held <= 0 || o.held > rem+1e-9 || math.IsNaN(o.held) {
				t.Fatalf("remaining %v: outlook %+v out of range", rem, o)
			}
		}
		if cmd.chance < prev.chance || cmd.chance == prev.chance && cmd.chance < 1 {
			t.Fatalf("remaining %v: chance %v did not grow from %v", rem, cmd.chance, prev.chance)
		}
		if page.chance <= cmd.chance || page.held >= cmd.held {
			t.Fatalf("remaining %v: a page (%+v) is not likelier to be used than a command's output (%+v)", rem, page, cmd)
		}
		prev = cmd
	}
	// A page of a document read in order, with a constant hazard h: chance 1-exp(-h*rem),
	// held (1-exp(-h*rem))/h.
	h, _ := r.hazard(12, toolAction{tool: "Read", kind: actRead})
	page, _ := r.outlook(12, toolAction{tool: "Read", kind: actRead}, 40)
	if want := 1 - math.Exp(-h*40); math.Abs(page.chance-want) > 1e-9 {
		t.Fatalf("chance %v, want %v", page.chance, want)
	}
	if want := (1 - math.Exp(-h*40)) / h; math.Abs(page.held-want) > 0.01*want {
		t.Fatalf("held %v, want %v", page.held, want)
	}
	// A command's output, with a hazard that decays as its rank grows: held against a fine
	// numerical integral of its survival.
	hc, _ := r.hazard(10, toolAction{tool: "bash", kind: actCommand})
	rank := float64(r.nres - 1) // the first result scanned
	cum, held := 0.0, 0.0
	const dt = 0.001
	for t := 0.0; t < 300; t += dt {
		held += math.Exp(-cum) * dt
		cum += hc * math.Pow(rank/(rank+t+dt/2), 0.8) * dt
	}
	cmd, _ := r.outlook(10, toolAction{tool: "bash", kind: actCommand}, 300)
	if math.Abs(cmd.held-held) > 0.01*held || math.Abs(cmd.chance-(1-math.Exp(-cum))) > 0.01 {
		t.Fatalf("outlook %+v, numerically held %v, chance %v", cmd, held, 1-math.Exp(-cum))
	}
}
