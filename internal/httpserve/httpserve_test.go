package httpserve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
)

// Serve answers until its context ends, then returns nil and the
// listener is closed; a listener that fails makes it return the error.
func TestServeUntilTheContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, "", "") }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after the context ended = %v, want nil", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String()); err == nil {
		t.Fatal("still serving after Serve returned")
	}

	bad, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	err = Serve(context.Background(), &http.Server{}, bad, "", "")
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve on a closed listener = %v, want its error", err)
	}
}
