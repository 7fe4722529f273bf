package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/budget"
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

// WriteText writes the result as text for a terminal, every line under 100 columns: the
// figures that matter first (what the agent pays, read-back included; what was kept; what
// broke), then where the tokens went and
// how long Prepare took, then cost and recall per set of trajectories, a legend, and notes
// (among them why nothing compacted, when nothing did).
func (r *Result) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "replay: %d trajectories, %d calls; window %d, max output %d; prices: %s\n\n",
		r.Trajectories, r.Calls, r.Window, r.MaxOutput, r.Profile)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tpaid\tvs raw\tcost\tvs raw\trecall\tlost\toverflow\tinvalid\tcompact\tpeak\t")
	for _, t := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.3f\t%s\t%.4f\t%d\t%d\t%d\t%d\t%d\t\n",
			t.Name, t.CostWithReadBack, ratio(t.CostWithReadBackVsRaw), t.Cost, ratio(t.CostVsRaw), t.Recall, t.Lost, t.Overflows, t.Invalid, t.Compactions, t.PeakTokens)
	}
	fmt.Fprintf(tw, "floor\t\t\t%.3f\t%s\t\n", r.Floor.Cost, ratio(r.Floor.CostVsRaw))
	tw.Flush()
	fmt.Fprintf(ew, "\ntokens and Prepare latency\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tinput\tcached\tsum in\tsum out\tp50 µs\tp99 µs\t")
	for _, t := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t\n",
			t.Name, t.InputTokens, t.CachedTokens, t.SummaryInputTokens, t.SummaryOutputTokens, t.PrepareP50US, t.PrepareP99US)
	}
	tw.Flush()
	if len(r.Sets) > 0 {
		r.writeSets(ew)
	}
	fmt.Fprintf(ew, "\nrecall, recoverable recall and the cost of reading missed terms back\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trecall\trecoverable\tread back\tpaid\t")
	for _, t := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%d\t%.3f\t\n", t.Name, t.Recall, t.RecoverableRecall, t.ReadBackTokens, t.CostWithReadBack)
	}
	tw.Flush()
	fmt.Fprintf(ew, "\n%s", r.legend())
	var notes []string
	if n := r.noCompactionNote(); n != "" {
		notes = append(notes, n)
	}
	for _, t := range r.Strategies {
		if len(t.Errors) > 0 {
			notes = append(notes, fmt.Sprintf("%s: Prepare failed %s (the unmanaged request was measured)", t.Name, counts(t.Errors)))
		}
	}
	for _, s := range r.Sets {
		if s.Recorded != nil {
			notes = append(notes, fmt.Sprintf("%s: the recorded runs reported %d input tokens (%d cached) over %d calls (by the recorded model's own tokenizer)",
				s.Name, s.Recorded.InputTokens, s.Recorded.CachedTokens, s.Recorded.Calls))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(ew)
		for _, n := range notes {
			fmt.Fprintln(ew, wrap(n, 96))
		}
	}
	return ew.err
}

// setsPerTable bounds the strategy columns of one per-set table so that lines stay short.
const setsPerTable = 4

// writeSets writes cost (vs raw) and recall per set of trajectories, the strategies split over
// tables of at most setsPerTable columns.
func (r *Result) writeSets(ew io.Writer) {
	names := make([]string, len(r.Strategies))
	for i, t := range r.Strategies {
		names[i] = t.Name
	}
	fmt.Fprintf(ew, "\nper set: paid (vs raw), cost (vs raw) and recall\n")
	// The first table has the floor in one of its columns.
	for lo, hi := 0, min(setsPerTable-1, len(names)); lo < len(names); lo, hi = hi, min(hi+setsPerTable, len(names)) {
		if lo > 0 {
			fmt.Fprintln(ew)
		}
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "set\truns\tcalls\t"
		if lo == 0 {
			head += "floor\t"
		}
		fmt.Fprintln(tw, head+strings.Join(names[lo:hi], "\t")+"\t")
		for _, s := range r.Sets {
			row := []string{s.Name, fmt.Sprint(s.Trajectories), fmt.Sprint(s.Calls)}
			cost := []string{"", "", "cost"}
			rec := []string{"", "", "recall"}
			if lo == 0 {
				row = append(row, "")
				cost = append(cost, fmt.Sprintf("%.3f (%s)", s.Floor.Cost, ratio(s.Floor.CostVsRaw)))
				rec = append(rec, "")
			}
			for _, t := range s.Strategies[lo:min(hi, len(s.Strategies))] {
				row = append(row, fmt.Sprintf("%.3f (%s)", t.CostWithReadBack, ratio(t.CostWithReadBackVsRaw)))
				cost = append(cost, fmt.Sprintf("%.3f (%s)", t.Cost, ratio(t.CostVsRaw)))
				rec = append(rec, fmt.Sprintf("%.4f", t.Recall))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			fmt.Fprintln(tw, strings.Join(cost, "\t")+"\t")
			fmt.Fprintln(tw, strings.Join(rec, "\t")+"\t")
		}
		tw.Flush()
	}
}

// legend explains the columns in a few short lines.
func (r *Result) legend() string {
	return fmt.Sprintf(`paid      what the agent pays: cost plus reading back what the requests no longer showed
          (a round trip at the cached price, and read back, billed uncached); vs raw:
          paid / raw's (raw never reads back)
cost      input, cached input and output tokens priced per million (%s: uncached %g,
          cached %g, output %g), summary calls included; vs raw: cost / raw's cost
recall    share of the identifiers, paths and numbers a call's history refers to that
          its request still holds (1 = nothing forgotten)
lost      messages that were at some call neither in the request nor readable from the store
overflow  calls whose input + max output exceeds the window; invalid: broken tool-call pairs
compact   summaries made; sum in / sum out: tokens the summarizer read / wrote
peak      largest request in tokens; cached: input a prompt cache would serve
floor     every message sent once, whole, uncached: a strategy that shows each message
          whole costs at least this; one below it cut something before it was ever seen
recoverable  recall counting also what the request shows a reference to (a stored tool
          result, the archive); read back: tokens of one ctxmgr_read per such message
`, r.Profile, r.Prices.Uncached, r.Prices.Cached, r.Prices.Output)
}

// noCompactionNote says why the strategies that can summarize made no summary, when some
// made none: their largest request stayed under their compaction trigger.
func (r *Result) noCompactionNote() string {
	var idle []string
	lo, hi := 1.0, 0.0
	peak := 0
	for _, t := range r.Strategies {
		if t.Name == StrategyRaw || t.Compactions > 0 {
			continue
		}
		cfg, err := strategyConfig(t.Name, r.Window, r.MaxOutput)
		if err != nil || cfg.DisableSummary {
			continue
		}
		th := cfg.Budget.Threshold
		if th == 0 {
			th = budget.DefaultThreshold
		}
		if float64(t.PeakTokens+r.MaxOutput) > th*float64(r.Window) {
			continue // it came near the trigger; something else kept it from summarizing
		}
		idle = append(idle, t.Name)
		lo, hi = min(lo, th), max(hi, th)
		peak = max(peak, t.PeakTokens)
	}
	if len(idle) == 0 {
		return ""
	}
	trig := fmt.Sprintf("%g%%", math.Round(lo*100))
	if hi != lo {
		trig = fmt.Sprintf("%g-%g%%", math.Round(lo*100), math.Round(hi*100))
	}
	return fmt.Sprintf("%s made no summary: their largest request (at most %d tokens) plus the %d reserved "+
		"for the reply stays under their compaction trigger (%s of the %d-token window), so they differ from raw "+
		"only by masking and offloading. To see them compact, try --window 32768 --max-output 4096.",
		strings.Join(idle, ", "), peak, r.MaxOutput, trig, r.Window)
}

// wrap breaks s into lines of at most width columns at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	col := 0
	for i, word := range strings.Fields(s) {
		n := utf8.RuneCountInString(word)
		if i > 0 {
			if col+1+n > width {
				b.WriteString("\n")
				col = 0
			} else {
				b.WriteByte(' ')
				col++
			}
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
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
