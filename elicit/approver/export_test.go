package approver

// SeenLimit exposes seenLimit to the external tests.
const SeenLimit = seenLimit

// WithSeenLimit sets the bound of shown prompts a Client keeps, in place
// of SeenLimit.
func WithSeenLimit(o Options, n int) Options {
	o.seenLimit = n
	return o
}
