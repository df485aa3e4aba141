package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// One state directory, one fulfiller: the embedded server's file store
// has no lock of its own, and two servers writing one directory corrupt
// it (two claims of one id both won). A second Open of a directory in use
// fails at once, naming the directory and the process that holds it; the
// directory is free again once the first store is closed, or its process
// dies (the lock is the kernel's, released with the process).
func TestDirInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Mode: Mode{Kind: Dir, Dir: dir}, Space: "s", Member: "m"}
	first := openStore(t, cfg)
	ctx := ctxT(t)
	_, err := Open(ctx, cfg)
	if !errors.Is(err, ErrDirInUse) {
		t.Fatalf("second Open: %v, want ErrDirInUse", err)
	}
	if want := fmt.Sprintf("state directory %s is in use by another fulfiller (pid %d)", dir, os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("second Open: %q, want it to say %q", err, want)
	}
	if won, err := first.Claim(ctx, "p1"); err != nil || !won {
		t.Fatalf("the first store after the refused Open: Claim = %v, %v", won, err)
	}
	first.Close()
	again, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	defer again.Close()
	if won, err := again.Claim(ctx, "p1"); err != nil || won {
		t.Fatalf("Claim of p1 after reopening = %v, %v; want not won", won, err)
	}
}
