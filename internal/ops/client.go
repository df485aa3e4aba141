package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls a fulfiller's operator API, as `fulfiller grants` does.
type Client struct {
	// Base is the API's address: http://HOST:PORT (a bare HOST:PORT, as
	// run's --http takes it, means http://).
	Base string
	// Token is the bearer token (--http-token); never logged or printed.
	Token string
	// HTTP is the client to use [a client with a 10s timeout].
	HTTP *http.Client
}

// APIError is an answer of the operator API other than success.
type APIError struct {
	Status  int
	Message string // the body's "error"
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the operator API answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("the operator API answered %d: %s", e.Status, e.Message)
}

// Grants lists the grants (GET /v1/grants).
func (c *Client) Grants(ctx context.Context) ([]GrantView, error) {
	var out GrantList
	if err := c.do(ctx, http.MethodGet, "/v1/grants", &out); err != nil {
		return nil, err
	}
	return out.Grants, nil
}

// RevokeGrant revokes the grant id (DELETE /v1/grants/ID).
func (c *Client) RevokeGrant(ctx context.Context, id string) (GrantView, error) {
	var out GrantView
	err := c.do(ctx, http.MethodDelete, "/v1/grants/"+url.PathEscape(id), &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	base := strings.TrimSuffix(c.Base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return fmt.Errorf("operator API %s: %w", c.Base, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("operator API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("operator API %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("operator API %s %s: %w", method, path, err)
	}
	return nil
}
