package turns

import (
	"slices"
	"testing"
)

func TestBoundaries(t *testing.T) {
	tests := []struct {
		spec string
		want []int
	}{
		{"", nil},
		{"u", []int{0}},
		{"a a a", []int{0}},
		{"s", []int{0}},
		{"t(x)", []int{0}},
		{"a(x) t(x) u a", []int{0, 2}},
		{"s u a u a", []int{0, 1, 3}},
		{"u a(x) t(x) a(y) t(y) a", []int{0}},
		{"u a s u a(x,y) t(y) t(x) a u", []int{0, 3, 8}},
	}
	for _, tt := range tests {
		if got := Boundaries(hist(tt.spec)); !slices.Equal(got, tt.want) {
			t.Errorf("Boundaries(%q) = %v, want %v", tt.spec, got, tt.want)
		}
	}
}

func TestSafeCut(t *testing.T) {
	const (
		turns3  = "u a(x) t(x) a u a(y) t(y) a u a" // boundaries 0 4 8, len 10
		giant   = "u a(x) t(x) a(y) t(y) a"         // one turn, len 6
		leading = "a(x) t(x) u a"                   // boundaries 0 2, len 4
		onlyA   = "a a a"
		// invalid: x is answered after a user message, so the boundary at 2 would orphan it.
		straddle = "u a(x) u t(x) u a"
	)
	type res struct {
		cut int
		ok  bool
	}
	fail := res{0, false}
	tests := []struct {
		name          string
		spec          string
		target        int
		cut, fwd, bwd res
	}{
		{"empty, 0", "", 0, res{0, true}, res{0, true}, res{0, true}},
		{"empty, beyond", "", 3, res{0, true}, res{0, true}, res{0, true}},
		{"empty, negative", "", -1, res{0, true}, res{0, true}, res{0, true}},
		{"negative clamps to 0", turns3, -5, res{0, true}, res{0, true}, res{0, true}},
		{"at 0", turns3, 0, res{0, true}, res{0, true}, res{0, true}},
		{"inside first turn", turns3, 1, res{4, true}, res{4, true}, fail},
		{"end of first turn", turns3, 3, res{4, true}, res{4, true}, fail},
		{"on a boundary", turns3, 4, res{4, true}, res{4, true}, res{4, true}},
		{"inside second turn", turns3, 5, res{4, true}, res{8, true}, res{4, true}},
		{"between call and result", turns3, 6, res{4, true}, res{8, true}, res{4, true}},
		{"last boundary", turns3, 8, res{8, true}, res{8, true}, res{8, true}},
		{"inside last turn", turns3, 9, res{8, true}, fail, res{8, true}},
		{"at len", turns3, 10, res{10, true}, res{10, true}, res{10, true}},
		{"beyond len", turns3, 99, res{10, true}, res{10, true}, res{10, true}},
		{"giant turn, inside", giant, 3, fail, fail, fail},
		{"giant turn, 1", giant, 1, fail, fail, fail},
		{"giant turn, last", giant, 5, fail, fail, fail},
		{"giant turn, at 0", giant, 0, res{0, true}, res{0, true}, res{0, true}},
		{"giant turn, at len", giant, 6, res{6, true}, res{6, true}, res{6, true}},
		{"leading assistant call", leading, 1, res{2, true}, res{2, true}, fail},
		{"leading assistant call, after", leading, 3, res{2, true}, fail, res{2, true}},
		{"only assistant messages", onlyA, 2, fail, fail, fail},
		{"only assistant messages, len", onlyA, 3, res{3, true}, res{3, true}, res{3, true}},
		{"straddling pair blocks boundary", straddle, 2, res{4, true}, res{4, true}, fail},
		{"straddling pair, after", straddle, 5, res{4, true}, fail, res{4, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := hist(tt.spec)
			before := cloneAll(msgs)
			for _, c := range []struct {
				name string
				opts CutOptions
				want res
			}{{"SafeCut", CutOptions{}, tt.cut}, {"SafeCutForward", CutOptions{Search: Forward}, tt.fwd}, {"SafeCutBackward", CutOptions{Search: Backward}, tt.bwd}} {
				cut, ok := SafeCut(msgs, tt.target, c.opts)
				if (res{cut, ok}) != c.want {
					t.Errorf("%s(%q, %d) = %d, %v; want %d, %v", c.name, tt.spec, tt.target, cut, ok, c.want.cut, c.want.ok)
				}
			}
			if notation(msgs) != notation(before) {
				t.Fatal("input modified")
			}
		})
	}
}

func TestSafeCutBackwardIteration(t *testing.T) {
	cases := []struct {
		spec   string
		target int
		cut    int
		ok     bool
	}{
		// One turn of tool iterations: a cut may fall before any assistant message that
		// follows complete results.
		{"u a(x) t(x) a(y) t(y) a", 5, 5, true},
		{"u a(x) t(x) a(y) t(y) a", 4, 3, true},
		{"u a(x) t(x) a(y) t(y) a", 2, 1, true},
		// Parallel calls: no cut between the call and its last result.
		{"u a(x,y) t(x) t(y) a", 3, 1, true},
		{"a(x) t(x)", 1, 0, false},
		{"u a", 0, 0, true},
		{"u a", 9, 2, true},
	}
	for _, c := range cases {
		cut, ok := SafeCut(hist(c.spec), c.target, CutOptions{Search: Backward, Iterations: true})
		if cut != c.cut || ok != c.ok {
			t.Errorf("SafeCut(%q, %d, Backward, Iterations) = %d, %v; want %d, %v", c.spec, c.target, cut, ok, c.cut, c.ok)
		}
	}
}
