package fulfill

// storeWorkers is how many decide workers run with a store: enough
// proposals in flight to share each sync of a durable store.
const storeWorkers = 64
