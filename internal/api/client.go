package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultURL is where the agent listens by default.
const DefaultURL = "http://localhost:9400"

// Client reads the agent's API. Its zero value talks to DefaultURL.
type Client struct {
	URL  string       // base URL of the agent; "" means DefaultURL
	HTTP *http.Client // nil means a client with a 10 s timeout
}

// Containers fetches /api/v1/containers.
func (c *Client) Containers(ctx context.Context) (ContainersResponse, error) {
	var out ContainersResponse
	err := c.get(ctx, "/api/v1/containers", &out)
	return out, err
}

// GPUs fetches /api/v1/gpus.
func (c *Client) GPUs(ctx context.Context) (GPUsResponse, error) {
	var out GPUsResponse
	err := c.get(ctx, "/api/v1/gpus", &out)
	return out, err
}

// StatusError is an error answer from the agent.
type StatusError struct {
	Status int
	Error_ Error
}

func (e *StatusError) Error() string {
	if e.Error_.Message != "" {
		return fmt.Sprintf("agent answered %d: %s", e.Status, e.Error_.Message)
	}
	return fmt.Sprintf("agent answered %d", e.Status)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	base := c.URL
	if base == "" {
		base = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(base, "/") + path)
	if err != nil {
		return fmt.Errorf("agent URL %q: %w", base, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the agent at %s (is `gpumeter serve` running?): %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Status: resp.StatusCode}
		_ = json.Unmarshal(body, &se.Error_)
		return se
	}
	if err := json.Unmarshal(body, out); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Errorf("%s: the agent's answer is not JSON at byte %d", path, syn.Offset)
		}
		return fmt.Errorf("%s: unexpected answer: %w", path, err)
	}
	return nil
}
