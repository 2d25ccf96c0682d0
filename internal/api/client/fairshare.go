package client

import (
	"context"
	"errors"
	"net/url"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// FairShare returns the queue's fair-share table: every row for admins
// and viewers, a user's own row, their team's and the totals for a user.
func (c *Client) FairShare(ctx context.Context) (apitype.FairShare, error) {
	var out apitype.FairShare
	err := c.getJSON(ctx, "/api/v1/fairshare", nil, liveTimeout, &out)
	return out, err
}

// LiftBudget lets team start jobs again for the rest of the calendar
// month, though it is over its budget; admins only.
func (c *Client) LiftBudget(ctx context.Context, team string) (apitype.BudgetLift, error) {
	var out apitype.BudgetLift
	if team == "" {
		return out, errors.New("a budget lift needs a team")
	}
	err := c.postJSON(ctx, "/api/v1/fairshare/budgets/"+url.PathEscape(team)+"/lift", struct{}{}, liveTimeout, &out)
	return out, err
}
