package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/mewkit/fulfiller/internal/printable"
)

// SignatureHeader carries the HMAC-SHA256 of a webhook's body, keyed by
// --notify-secret-file: "sha256=" and the lowercase hex digest.
const SignatureHeader = "X-Fulfiller-Signature"

// EventHeader repeats the event's type, for receivers that route before
// they parse.
const EventHeader = "X-Fulfiller-Event"

// Sign is SignatureHeader's value for body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Webhook POSTs each event as JSON, signed.
type Webhook struct {
	url, name string
	secret    []byte
	client    *http.Client
}

// Kind implements Target.
func (w *Webhook) Kind() string { return "webhook" }

// String implements Target: scheme and host only.
func (w *Webhook) String() string { return w.name }

// Send implements Target. A 2xx answer is delivered; 4xx other than 408
// and 429 is permanent (the receiver refuses the request itself, e.g. a
// signature it does not accept); anything else is retried.
func (w *Webhook) Send(ctx context.Context, ev Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("%w: encode the event: %w", ErrPermanent, err)
	}
	// Bidirectional and invisible characters others wrote travel as \u
	// escapes: the same text to a JSON reader, visible to a person
	// reading the body.
	body = printable.JSON(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPermanent, w.name, unURL(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(w.secret, body))
	req.Header.Set(EventHeader, string(ev.Type))
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, unURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return statusError(w.name, resp.StatusCode, resp.Status)
}

// statusError reads an HTTP answer: nil for 2xx, permanent for a 4xx
// other than 408 and 429.
func statusError(name string, code int, status string) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s answered %s", ErrPermanent, name, status)
	}
	return fmt.Errorf("%s answered %s", name, status)
}

// unURL drops the URL a *url.Error names: its path or query may be the
// key (a Slack webhook's is), and errors are logged.
func unURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
