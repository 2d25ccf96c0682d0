package spec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/moby/moby/client"
)

// TestEngineTakesTheSpec creates and starts a built spec on the real
// engine: the engine accepts every setting and keeps it, the kernel applies it,
// mounts what was asked (Verify agrees), and refuses a second create of
// the same job.
func TestEngineTakesTheSpec(t *testing.T) {
	cli := dockertest.Client(t)
	// The container names GPUs and is labelled as a job: the queue's own
	// engine tests, which clean up labelled job containers, wait for it.
	dockertest.LockGPUs(t)
	h := newHostTree(t)
	rules := testRules(h.root)
	rules.Images = []string{"gpumeter-test-sleeper:*"}
	req := testRequest()
	req.Image = dockertest.SleeperImage(t, cli)
	req.Command = []string{"ignore-term"}
	req.Mounts = []string{filepath.Join(h.root, "models") + ":/models:ro", filepath.Join(h.root, "scratch") + ":/scratch"}
	req.CPUs, req.Memory, req.ShmSize = 1, 256<<20, 128<<20
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	jobID := "t-" + hex.EncodeToString(b)
	spec, err := Build(req, rules, alice, jobID, gpuPair, Env)
	if err != nil {
		t.Fatal(err)
	}
	spec.Config.Labels[dockertest.Label] = "1"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := client.ContainerCreateOptions{Name: spec.Name, Config: spec.Config, HostConfig: spec.HostConfig}
	res, err := cli.ContainerCreate(ctx, opts)
	if err != nil {
		t.Fatalf("create %s: %v", spec.Name, err)
	}
	t.Cleanup(func() { dockertest.Remove(t, cli, res.ID) })
	if _, err := cli.ContainerCreate(ctx, opts); !cerrdefs.IsConflict(err) {
		t.Errorf("second create of %s: %v, want a name conflict", spec.Name, err)
	}
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", spec.Name, err)
	}
	got := dockertest.Inspect(t, cli, res.ID)
	if err := Verify(got.Mounts, spec.HostConfig.Mounts); err != nil {
		t.Errorf("Verify of the engine's mounts: %v", err)
	}
	if got.State == nil || !got.State.Running {
		t.Errorf("state %+v, want running", got.State)
	}
	hc := got.HostConfig
	if hc.Privileged || hc.PidMode.IsHost() || hc.IpcMode != "private" || hc.UTSMode.IsHost() || hc.NetworkMode != "bridge" ||
		len(hc.Devices) != 0 || len(hc.MaskedPaths) == 0 || (hc.OomKillDisable != nil && *hc.OomKillDisable) {
		t.Errorf("engine's host config: privileged %v pid %q ipc %q uts %q network %q devices %v masked %q",
			hc.Privileged, hc.PidMode, hc.IpcMode, hc.UTSMode, hc.NetworkMode, hc.Devices, hc.MaskedPaths)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges:true"}) {
		t.Errorf("engine's capabilities dropped %q, security options %q", hc.CapDrop, hc.SecurityOpt)
	}
	// What the kernel says of the job's process, where the engine runs
	// on this host.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", got.State.Pid))
	if err != nil {
		t.Logf("the job's process is not on this host (%v); its kernel status is not checked", err)
	} else {
		for _, want := range []string{
			"NoNewPrivs:\t1\n",               // no-new-privileges
			"Seccomp:\t2\n",                  // the default seccomp profile filters
			"CapBnd:\t0000000000800000\n",    // CAP_SYS_NICE, from the allowlist, alone
			"CapEff:\t0000000000000000\n",    // none in effect for a user that is not root
			"Uid:\t4242\t4242\t4242\t4242\n", // the submitter
			"Gid:\t4242\t4242\t4242\t4242\n",
		} {
			if !strings.Contains(string(status), want) {
				t.Errorf("job's /proc status lacks %q:\n%s", want, status)
			}
		}
		if groups := statusLine(string(status), "Groups:"); !slices.Contains(groups, "2000") {
			t.Errorf("job's groups %q lack the submitter's 2000", groups)
		}
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != DefaultMaxPids || len(hc.Ulimits) != 1 || hc.Ulimits[0].Name != "nofile" ||
		hc.Ulimits[0].Hard != int64(DefaultOpenFiles()) || hc.Ulimits[0].Soft != hc.Ulimits[0].Hard {
		t.Errorf("engine's pids limit %v, ulimits %v; want %d and nofile %d", hc.PidsLimit, hc.Ulimits, DefaultMaxPids, DefaultOpenFiles())
	}
	if limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", got.State.Pid)); err == nil {
		if want := fmt.Sprintf("Max open files            %-21d%-21dfiles", DefaultOpenFiles(), DefaultOpenFiles()); !strings.Contains(string(limits), want) {
			t.Errorf("job's /proc limits lack %q:\n%s", want, limits)
		}
	}
	if got.Config.User != "4242:4242" || got.HostConfig.ShmSize != 128<<20 || got.HostConfig.NanoCPUs != 1e9 {
		t.Errorf("user %q shm %d cpus %d, want the spec's", got.Config.User, got.HostConfig.ShmSize, got.HostConfig.NanoCPUs)
	}
}

// statusLine returns the fields of the /proc status line named key.
func statusLine(status, key string) []string {
	for line := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}
