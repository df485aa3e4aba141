package fulfill

import (
	"context"
	"time"
)

// retryStore is how long recover waits before trying the store again.
const retryStore = time.Second

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
