package ctxmgr

import "fmt"

// Prices are the relative prices of input tokens under a provider's prompt cache, in any unit
// (only their ratio and difference matter): Uncached is what an input token costs when the
// cache does not serve it (Anthropic bills the cache write at 1.25x the base price), Cached
// what it costs when it does (0.1x at Anthropic and OpenAI).
type Prices struct {
	Uncached float64
	Cached   float64
}

// Price profiles, per base input token.
var (
	PricesAnthropic = Prices{Uncached: 1.25, Cached: 0.1}
	PricesOpenAI    = Prices{Uncached: 1.0, Cached: 0.1}
)

// PricesByName returns a price profile: "anthropic" (also "") or "openai".
func PricesByName(name string) (Prices, error) {
	switch name {
	case "", "anthropic":
		return PricesAnthropic, nil
	case "openai":
		return PricesOpenAI, nil
	}
	return Prices{}, fmt.Errorf("%w: unknown price profile %q (known: anthropic, openai)", ErrInvalidConfig, name)
}

func (p Prices) validate() error {
	if p.Cached < 0 || p.Uncached <= 0 || p.Cached > p.Uncached {
		return configErr("Prices", "want 0 <= Cached <= Uncached and Uncached > 0, got %+v", p)
	}
	return nil
}

// RewriteEconomics is the cost model every rewrite of history already sent is decided by
// (superseding, age-out, masking).
//
// A rewrite at some position of a request the provider has cached changes the prefix from
// there on: on the next call the tokens after the change point that the previous call sent
// (after: from the first rewritten message, in its new form, up to the previous call's reply;
// the reply and what follows it are new and billed uncached whether or not the rewrite is
// made) are billed uncached instead of cached, a one-off miss of after*(Uncached-Cached). In
// exchange every later call sends saved fewer tokens, which would have been cached:
// saved*Cached per call. How many calls are still to come is unknown; by the Copernican
// argument (the present call is at a uniformly random point of the run), more than a third of
// the calls made so far remain with probability 3/4, so the estimate is calls/3, and a rewrite
// that pays under it pays off at least 3 times in 4. Early in a run that estimate says less
// than the run is known to hold: an agent in its tool loop makes a few more calls, so it is at
// least 3 (with a lower floor, the first pages of a long read would stay whole, then deep in
// the prefix, for the whole run).
//
// Expected returns the expected net saving in base-price tokens (positive: the rewrite pays):
//
//	max(3, calls/3) * saved * Cached  -  after * (Uncached - Cached)
//
// Summarizing is not decided here: it runs only under window pressure (the threshold), where
// the request must shrink whatever the cache says, and it costs an LLM call besides. The
// ingestion cap changes nothing already sent (a result is capped before it is ever sent), so
// it costs no cache miss and needs no decision: the cap only trades recall for size.
func (p Prices) Expected(saved, after, calls int) float64 {
	if saved <= 0 {
		return -float64(after) * (p.Uncached - p.Cached)
	}
	remaining := max(3, float64(calls)/3)
	return remaining*float64(saved)*p.Cached - float64(after)*(p.Uncached-p.Cached)
}

// Pays reports whether a rewrite saving saved tokens per call, with after tokens from its
// change point on, pays after calls calls (see Expected).
func (p Prices) Pays(saved, after, calls int) bool {
	return saved > 0 && p.Expected(saved, after, calls) >= 0
}

// rewriteCandidate is one message a rewrite could replace: its history position and the
// tokens it would save.
type rewriteCandidate struct {
	pos, save int
	kind      viewKind // the view it would get
}

// bestBatch picks, among candidates sorted by ascending position, the batch that pays best:
// all candidates from some index on (a batch shares one cache miss, the one from its first
// change point, so taking every later candidate with it costs nothing more). tail(pos) is the
// number of tokens currently sent from position pos on. It returns the index the batch starts
// at (len(cands) when nothing pays) and the batch's expected net saving.
func (p Prices) bestBatch(cands []rewriteCandidate, tail func(pos int) int, calls int) (int, float64) {
	best, bestVal := len(cands), 0.0
	saved := 0
	for k := len(cands) - 1; k >= 0; k-- {
		saved += cands[k].save
		// After the rewrite, the tail from the first change point is smaller by what the
		// batch saves.
		after := tail(cands[k].pos) - saved
		if v := p.Expected(saved, max(after, 0), calls); v > bestVal {
			best, bestVal = k, v
		}
	}
	return best, bestVal
}
