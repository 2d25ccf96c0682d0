package doctor

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// RunGPUs runs image with every GPU (`docker run --rm --gpus all IMAGE
// CMD`) and returns what it wrote; the container is removed either way.
func (e Engine) RunGPUs(ctx context.Context, image string, cmd []string) (string, error) {
	res, err := e.Client.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &mcontainer.Config{Image: image, Cmd: cmd, Labels: map[string]string{"gpumeter.doctor": "1"}},
		HostConfig: &mcontainer.HostConfig{Resources: mcontainer.Resources{DeviceRequests: []mcontainer.DeviceRequest{
			{Count: -1, Capabilities: [][]string{{"gpu"}}},
		}}},
	})
	if err != nil {
		return "", fmt.Errorf("create a container of %s: %w", image, err)
	}
	defer func() {
		// The run's own context may be what ended; removal gets its own.
		_, _ = e.Client.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
	}()
	wait := e.Client.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: mcontainer.WaitConditionNextExit})
	if _, err := e.Client.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return "", fmt.Errorf("start a container of %s with --gpus all: %w", image, err)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		return "", fmt.Errorf("wait for the container of %s: %w", image, err)
	}
	rc, err := e.Client.ContainerLogs(ctx, res.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", fmt.Errorf("logs of the container of %s: %w", image, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		return "", fmt.Errorf("logs of the container of %s: %w", image, err)
	}
	if code != 0 {
		return out.String(), fmt.Errorf("%s %s exited %d: %s", image, strings.Join(cmd, " "), code, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// GPURunner runs a container with every GPU.
type GPURunner interface {
	RunGPUs(ctx context.Context, image string, cmd []string) (string, error)
}

var listedUUID = regexp.MustCompile(`\(UUID: (GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F-]+)\)`)

// RunTest asks for a container run with every GPU (doctor --run-test).
type RunTest struct {
	Runner GPURunner
	Image  string
	// Cmd is what runs in it; nvidia-smi -L when empty.
	Cmd []string
}

// runTest runs the test image with --gpus all and compares the GPUs it
// lists with NVML's.
func runTest(ctx context.Context, t *RunTest, lib []string) Result {
	r, image, cmd := t.Runner, t.Image, t.Cmd
	res := Result{ID: "gpu.run_test", Name: "a container sees the GPUs"}
	if len(cmd) == 0 {
		cmd = []string{"nvidia-smi", "-L"}
	}
	out, err := r.RunGPUs(ctx, image, cmd)
	if err != nil {
		res.Status, res.Detail = Fail, err.Error()
		switch msg := err.Error(); {
		case strings.Contains(msg, "could not select device driver"):
			res.Fix = "Docker has no GPU device driver: install the NVIDIA Container Toolkit, `nvidia-ctk runtime configure --runtime=docker`, and restart Docker so the hook is on its PATH"
		case strings.Contains(msg, "Failed to initialize NVML"):
			res.Fix = "the container lost its GPUs: with the systemd cgroup driver create the /dev/char symlinks (`nvidia-ctk system create-dev-char-symlinks --create-all`), or set no-cgroups correctly; see driver.dev_char"
		case strings.Contains(msg, "No such image") || strings.Contains(msg, "not found"):
			res.Fix = "pull it first (`docker pull " + image + "`), or name one that is here; any CUDA base image has nvidia-smi (nvidia/cuda:12.4.1-base-ubuntu22.04)"
		default:
			res.Fix = "read the error above; `" + strings.Join(append([]string{"docker", "run", "--rm", "--gpus", "all", image}, cmd...), " ") + "` reproduces it"
		}
		return res
	}
	var seen []string
	for _, m := range listedUUID.FindAllStringSubmatch(out, -1) {
		seen = append(seen, m[1])
	}
	if len(seen) == 0 {
		res.Status, res.Detail, res.Fix = Warn, fmt.Sprintf("the command listed no GPU UUIDs: %q", strings.TrimSpace(out)), "give a command that prints `nvidia-smi -L` lines"
		return res
	}
	var missing []string
	for _, u := range lib {
		if !slices.Contains(seen, u) {
			missing = append(missing, u)
		}
	}
	if len(missing) > 0 {
		res.Status, res.Detail = Fail, fmt.Sprintf("inside: %d GPUs; NVML on the host: %d; not seen inside: %s", len(seen), len(lib), strings.Join(missing, ", "))
		res.Fix = "check NVIDIA_VISIBLE_DEVICES in the image and the toolkit's config; a container that sees fewer GPUs than --gpus all asked for is misconfigured"
		return res
	}
	res.Status, res.Detail = Pass, fmt.Sprintf("the container saw %d GPUs, the same as NVML", len(seen))
	return res
}
