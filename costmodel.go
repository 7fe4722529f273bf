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
// saved*Cached per call. How many calls are still to come is unknown; the estimate is
// RemainingCalls: as many again as were made so far (the median under the Copernican
// argument: the present call is at a uniformly random point of the run), and at least 3 (an
// agent in its tool loop makes a few more calls).
//
// Expected returns the expected net saving in base-price tokens (positive: the rewrite pays):
//
//	RemainingCalls(calls) * saved * Cached  -  after * (Uncached - Cached)
//
// A lossy rewrite also removes what the agent may need again: its saving holds only until the
// agent reads that back, and its price includes the expected read-back (see outlook,
// readBackRisk and bestBatch). Summarizing is not decided
// here: it runs only under window pressure (the threshold), where the request must shrink
// whatever the cache says, and it costs an LLM call besides. The ingestion cap changes
// nothing already sent (a result is capped before it is ever sent), so it costs no cache miss
// and needs no decision: the cap only trades recall for size.
func (p Prices) Expected(saved, after, calls int) float64 {
	if saved <= 0 {
		return -float64(after) * (p.Uncached - p.Cached)
	}
	return RemainingCalls(calls)*float64(saved)*p.Cached - float64(after)*(p.Uncached-p.Cached)
}

// RemainingCalls is the cost model's estimate of the calls still to come in a run that has
// made calls calls: as many again, and at least 3.
func RemainingCalls(calls int) float64 { return max(3, float64(calls)) }

// Pays reports whether a rewrite saving saved tokens per call, with after tokens from its
// change point on, pays after calls calls (see Expected).
func (p Prices) Pays(saved, after, calls int) bool {
	return saved > 0 && p.Expected(saved, after, calls) >= 0
}

// rewriteCandidate is one message a rewrite could replace: its history position, the tokens
// it would save per call, and, for a lossy rewrite, the calls the saving is expected to hold
// and the expected cost of reading back what it removes (risk, in the price unit: see
// readBackRisk).
type rewriteCandidate struct {
	pos, save int
	// held is the expected number of calls to come that the saving holds: 0 means all of
	// them (a lossless rewrite); a lossy one holds until the agent reads back what it
	// removed (see outlook).
	held float64
	risk float64
	kind viewKind // the view it would get
}

// lossyMargin is how much a lossy rewrite made without window pressure must save beyond what
// it is expected to cost: its batch is made only when its expected net saving is at least
// half its expected costs (the cache miss and the read-back) again, so that it still pays
// when the hazard it was priced with is a third too low. A lossless batch (superseded copies
// that the later copy shows whole) needs no margin. Half is the margin at which `default`
// pays least, read-back included, on the real coding runs while its recall stays at least
// 0.99 (docs/strategies.md).
const lossyMargin = 0.5

// readBackRisk is the expected cost of removing text from a message of tokens tokens, in a
// request of context tokens: chance, the chance that the agent needs what was removed in the
// calls to come (see outlook), times reading the message back once: a round trip, the
// context sent again (cached) to ask for it, and the message itself, billed uncached.
func (p Prices) readBackRisk(chance float64, tokens, context int) float64 {
	return chance * (float64(tokens)*p.Uncached + float64(context)*p.Cached)
}

// bestBatch picks, among candidates sorted by ascending position, the batch that pays best:
// all candidates from some index on (a batch shares one cache miss, the one from its first
// change point, so taking every later candidate with it costs nothing more). tail(pos) is the
// number of tokens currently sent from position pos on. A batch's value is what its
// candidates save over the calls they hold (see Expected), less its cache miss and the
// expected read-back of its lossy candidates; a batch with lossy candidates must exceed those
// costs by lossyMargin of them. It returns the index the batch starts at (len(cands) when
// nothing pays) and the batch's expected net saving.
func (p Prices) bestBatch(cands []rewriteCandidate, tail func(pos int) int, calls int) (int, float64) {
	best, bestVal := len(cands), 0.0
	saved, gain, risk := 0, 0.0, 0.0
	remaining := RemainingCalls(calls)
	for k := len(cands) - 1; k >= 0; k-- {
		c := &cands[k]
		saved += c.save
		held := remaining
		if c.held > 0 {
			held = min(c.held, remaining)
		}
		gain += float64(c.save) * held * p.Cached
		risk += c.risk
		// After the rewrite, the tail from the first change point is smaller by what the
		// batch saves.
		after := max(tail(cands[k].pos)-saved, 0)
		miss := float64(after) * (p.Uncached - p.Cached)
		net := gain - miss - risk
		if risk > 0 && net < lossyMargin*(miss+risk) {
			continue
		}
		if net > bestVal {
			best, bestVal = k, net
		}
	}
	return best, bestVal
}
