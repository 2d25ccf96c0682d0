package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

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

// post sends m to the webhook, trying again with a doubling backoff after
// a failure, at most 1+w.Retries times. It returns the attempts made.
func post(ctx context.Context, client *http.Client, w Webhook, backoff time.Duration, m Message) (int, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	var last error
	for attempt := 1; ; attempt++ {
		last = postOnce(ctx, client, w, body)
		if last == nil || attempt > w.Retries || ctx.Err() != nil {
			return attempt, last
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, fmt.Errorf("%w (then %w)", last, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func postOnce(ctx context.Context, client *http.Client, w Webhook, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpumeter")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook: %s", resp.Status)
	}
	return nil
}
