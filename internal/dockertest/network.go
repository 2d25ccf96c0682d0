package dockertest

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// RemoveNetwork removes every network named name (the engine lists
// networks by a part of their name, so others are skipped), failing the
// test on an error other than its being gone already.
func RemoveNetwork(t testing.TB, cli *client.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("name", name)})
	if err != nil {
		t.Errorf("list networks %s: %v", name, err)
		return
	}
	for _, n := range res.Items {
		if n.Name != name {
			continue
		}
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove network %s: %v", name, err)
		}
	}
}
