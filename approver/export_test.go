package approver

// SeenLimit exposes seenLimit to the external tests.
const SeenLimit = seenLimit
