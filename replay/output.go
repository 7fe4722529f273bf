package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the result as exactly one JSON object and a newline.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// WriteText writes the result as text tables: one row per strategy with the totals, then the
// cost of each strategy relative to raw per set of trajectories.
func (r *Result) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "replay: %d trajectories, %d calls; window %d, max output %d; prices %s (per million tokens: uncached input %g, cached input %g, output %g)\n\n",
		r.Trajectories, r.Calls, r.Window, r.MaxOutput, r.Profile, r.Prices.Uncached, r.Prices.Cached, r.Prices.Output)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tinput\tcached\tsum in\tsum out\tcost\tvs raw\tpeak\toverflow\tinvalid\tlost\trecall\tcompact\tp50 µs\tp99 µs\t")
	for _, t := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.3f\t%s\t%d\t%d\t%d\t%d\t%.4f\t%d\t%.0f\t%.0f\t\n",
			t.Name, t.InputTokens, t.CachedTokens, t.SummaryInputTokens, t.SummaryOutputTokens, t.Cost, ratio(t.CostVsRaw),
			t.PeakTokens, t.Overflows, t.Invalid, t.Lost, t.Recall, t.Compactions, t.PrepareP50US, t.PrepareP99US)
	}
	tw.Flush()
	if len(r.Sets) > 0 {
		fmt.Fprintf(ew, "\nper set: cost (vs raw) and recall\n")
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := []string{"set", "runs", "calls"}
		for _, t := range r.Strategies {
			head = append(head, t.Name)
		}
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for _, s := range r.Sets {
			row := []string{s.Name, fmt.Sprint(s.Trajectories), fmt.Sprint(s.Calls)}
			for _, t := range s.Strategies {
				row = append(row, fmt.Sprintf("%.3f (%s)", t.Cost, ratio(t.CostVsRaw)))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			row = []string{"", "", "recall"}
			for _, t := range s.Strategies {
				row = append(row, fmt.Sprintf("%.4f", t.Recall))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
	}
	fmt.Fprintf(ew, "\nrecoverable recall (recalled, or readable through a reference the request shows) and cost with one read-back per term's message\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trecall\trecoverable\tread back\tcost+read back\t")
	for _, t := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%d\t%.3f\t\n", t.Name, t.Recall, t.RecoverableRecall, t.ReadBackTokens, t.CostWithReadBack)
	}
	tw.Flush()
	var notes []string
	for _, t := range r.Strategies {
		if len(t.Errors) > 0 {
			notes = append(notes, fmt.Sprintf("%s: Prepare failed %s (the unmanaged request was measured)", t.Name, counts(t.Errors)))
		}
	}
	for _, s := range r.Sets {
		if s.Recorded != nil {
			notes = append(notes, fmt.Sprintf("%s: the recorded runs reported %d input tokens (%d cached) over %d calls (the recorded model's own tokenizer)",
				s.Name, s.Recorded.InputTokens, s.Recorded.CachedTokens, s.Recorded.Calls))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(ew)
		for _, n := range notes {
			fmt.Fprintln(ew, n)
		}
	}
	return ew.err
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", x)
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
