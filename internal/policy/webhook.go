package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/retry"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// Message is the JSON body of a webhook POST. Text makes it a
// Slack-compatible incoming-webhook message too.
type Message struct {
	Text    string        `json:"text"`
	Kind    string        `json:"kind"` // notify, warn or stop
	DryRun  bool          `json:"dry_run"`
	StopAt  *time.Time    `json:"stop_at,omitempty"`
	Finding waste.Finding `json:"finding"`
}

// maxBackoff bounds the wait between two attempts.
const maxBackoff = 10 * time.Second

// post sends m to the webhook, at most 1+w.Retries times, until ctx ends.
// Only what can succeed later is tried again: a network error or timeout,
// a 5xx, or a 429, after its Retry-After when that is longer than the
// backoff (which starts at backoff and doubles); another status (a 4xx)
// is final. It returns the attempts made.
func post(ctx context.Context, client *http.Client, w config.Webhook, backoff time.Duration, m any) (int, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	return retry.Do(ctx, 1+w.Retries, retry.Backoff{Initial: backoff, Max: maxBackoff}, func() error {
		return postOnce(ctx, client, w, body)
	})
}

// postOnce makes one attempt, and marks its error for retry.Do.
func postOnce(ctx context.Context, client *http.Client, w config.Webhook, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return retry.Permanent(fmt.Errorf("webhook: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpumeter")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch code := resp.StatusCode; {
	case code/100 == 2:
		return nil
	case code == http.StatusTooManyRequests:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return retry.After(fmt.Errorf("webhook: %s (Retry-After %s)", resp.Status, d), d)
		}
		return fmt.Errorf("webhook: %s", resp.Status)
	case code/100 == 5:
		return fmt.Errorf("webhook: %s", resp.Status)
	default:
		return retry.Permanent(fmt.Errorf("webhook: %s", resp.Status))
	}
}

// retryAfter reads a Retry-After header: a number of seconds, or an HTTP
// date, which now has passed or not.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0).Round(time.Second), true
	}
	return 0, false
}
