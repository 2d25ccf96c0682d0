package client

import (
	"context"
	"errors"
	"net/url"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// Nodes returns the fleet's nodes, by name. An agent that is not in a
// fleet answers 503 fleet_off.
func (c *Client) Nodes(ctx context.Context) (apitype.Nodes, error) {
	var out apitype.Nodes
	err := c.getJSON(ctx, "/api/v1/nodes", nil, liveTimeout, &out)
	return out, err
}

// Consolidate asks which nodes could be drained now: their running jobs
// fit on the other nodes at queue.target_utilization.
func (c *Client) Consolidate(ctx context.Context) (apitype.Consolidation, error) {
	var out apitype.Consolidation
	err := c.getJSON(ctx, "/api/v1/nodes/consolidate", nil, liveTimeout, &out)
	return out, err
}

// SetDrained drains node (no new job starts there; its running jobs
// finish) or undrains it; admins only. An unknown node is a 404 with code
// node_not_found.
func (c *Client) SetDrained(ctx context.Context, node string, drained bool) (apitype.NodeDrain, error) {
	var out apitype.NodeDrain
	if node == "" {
		return out, errors.New("a drain needs a node")
	}
	verb := "/drain"
	if !drained {
		verb = "/undrain"
	}
	err := c.postJSON(ctx, "/api/v1/nodes/"+url.PathEscape(node)+verb, struct{}{}, liveTimeout, &out)
	return out, err
}
