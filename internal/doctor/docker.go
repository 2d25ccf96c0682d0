package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// DockerInfo is what the checks read from the engine.
type DockerInfo struct {
	APIVersion     string
	ServerVersion  string
	CgroupDriver   string
	Runtimes       []string
	DefaultRuntime string
	Rootless       bool
	RootDir        string
	CDISpecDirs    []string
}

// Docker is the engine as the checks see it.
type Docker interface {
	Info(ctx context.Context) (DockerInfo, error)
}

// Engine reads DockerInfo from a moby client.
type Engine struct{ Client *client.Client }

// Info pings the engine (negotiating the API version) and reads /info.
func (e Engine) Info(ctx context.Context) (DockerInfo, error) {
	ping, err := e.Client.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return DockerInfo{}, err
	}
	res, err := e.Client.Info(ctx, client.InfoOptions{})
	if err != nil {
		return DockerInfo{}, err
	}
	in := res.Info
	d := DockerInfo{APIVersion: ping.APIVersion, ServerVersion: in.ServerVersion, CgroupDriver: in.CgroupDriver,
		DefaultRuntime: in.DefaultRuntime, RootDir: in.DockerRootDir, CDISpecDirs: in.CDISpecDirs}
	for name := range in.Runtimes {
		d.Runtimes = append(d.Runtimes, name)
	}
	slices.Sort(d.Runtimes)
	d.Rootless = slices.ContainsFunc(in.SecurityOptions, func(o string) bool { return strings.Contains(o, "name=rootless") })
	return d, nil
}

func (s *state) dockerInfo(ctx context.Context) (*DockerInfo, error) {
	if s.info == nil && s.infoErr == nil {
		if s.Docker == nil {
			s.infoErr = errors.New("no Docker engine configured (docker.enabled is false)")
		} else if in, err := s.Docker.Info(ctx); err != nil {
			s.infoErr = err
		} else {
			s.info = &in
		}
	}
	return s.info, s.infoErr
}

func checkDocker(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return fail("start Docker (`systemctl start docker`), or set docker.host to its socket; the user needs access to it (root or the docker group)", "Docker: %v", err)
	}
	return pass("Docker %s, API %s, cgroup driver %s", in.ServerVersion, in.APIVersion, in.CgroupDriver)
}

func checkRootless(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable")
	}
	if !in.Rootless {
		if s.toolkit.noCgroups {
			return warn("set no-cgroups = false in [nvidia-container-cli] of /"+toolkitConfigPath, "rootful Docker with no-cgroups = true: containers are not confined to their GPUs by the device cgroup")
		}
		return pass("rootful")
	}
	if s.toolkit.read && !s.toolkit.noCgroups {
		return fail("`nvidia-ctk config --set nvidia-container-cli.no-cgroups --in-place` (rootless Docker cannot write device cgroups)", "rootless Docker with no-cgroups = false: GPU containers fail to start")
	}
	return pass("rootless, no-cgroups = true")
}

func checkSnap(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	snap := s.exists("snap/bin/docker") || s.exists("snap/docker")
	if err == nil && strings.Contains(in.RootDir, "/snap/") {
		snap = true
	}
	if snap {
		return fail("remove the snap (`snap remove docker`) and install Docker from docker.com's or your distribution's packages: the NVIDIA Container Toolkit does not support snap-packaged Docker", "Docker is installed as a snap")
	}
	return pass("not a snap")
}

const daemonJSON = "etc/docker/daemon.json"

// daemonConfig is the part of daemon.json the checks read.
type daemonConfig struct {
	DefaultRuntime string `json:"default-runtime"`
	Runtimes       map[string]struct {
		Path string `json:"path"`
	} `json:"runtimes"`
	Features map[string]bool `json:"features"`
}

// lineOf is the 1-based line of byte offset off in data.
func lineOf(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// readDaemonJSON reads daemon.json; a missing file is no error and no config.
func (s *state) readDaemonJSON() (*daemonConfig, Result, bool) {
	p := s.hostPath(daemonJSON)
	data, err := fs.ReadFile(s.Root, daemonJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Result{}, true
	}
	if err != nil {
		return nil, fail("make "+p+" readable", "%s: %v", p, unwrapPath(err)), false
	}
	var cfg daemonConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		line := 0
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			line = lineOf(data, se.Offset)
		case errors.As(err, &te):
			line = lineOf(data, te.Offset)
		}
		return nil, fail("correct the JSON (`python3 -m json.tool "+p+"` shows where); dockerd will not start with it", "%s:%d: not JSON: %v", p, line, err), false
	}
	return &cfg, Result{}, true
}

func checkDaemonJSON(_ context.Context, s *state) Result {
	cfg, bad, ok := s.readDaemonJSON()
	if !ok {
		return bad
	}
	if cfg == nil {
		return warn("`nvidia-ctk runtime configure --runtime=docker` writes it; then `systemctl restart docker`", "%s does not exist: the nvidia runtime is not configured there", s.hostPath(daemonJSON))
	}
	if _, ok := cfg.Runtimes["nvidia"]; !ok {
		return fail("`nvidia-ctk runtime configure --runtime=docker` and `systemctl restart docker`", "%s has no nvidia runtime", s.hostPath(daemonJSON))
	}
	return pass("%s registers the nvidia runtime (%s)", s.hostPath(daemonJSON), cfg.Runtimes["nvidia"].Path)
}

func checkRuntime(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable")
	}
	if !slices.Contains(in.Runtimes, "nvidia") {
		return fail("`nvidia-ctk runtime configure --runtime=docker` and `systemctl restart docker`", "docker info lists the runtimes %s, not nvidia", strings.Join(in.Runtimes, ", "))
	}
	if s.findBinary("nvidia-container-runtime-hook") == "" && s.findBinary("nvidia-container-runtime") == "" {
		return fail(installToolkit, "the nvidia runtime is registered but neither nvidia-container-runtime nor its hook is installed: `--gpus` cannot work")
	}
	if dirs, ok := s.dockerdPath(); ok {
		found := false
		for _, d := range dirs {
			if s.exists(strings.TrimPrefix(path.Join(d, "nvidia-container-runtime-hook"), "/")) {
				found = true
				break
			}
		}
		if !found {
			return fail("restart Docker (`systemctl restart docker`) so it starts with a PATH holding the toolkit's binaries, or put them in /usr/bin",
				"nvidia-container-runtime-hook is on none of dockerd's PATH (%s): `--gpus` fails with \"could not select device driver\"", strings.Join(dirs, ":"))
		}
	}
	return pass("docker info lists nvidia among %s", strings.Join(in.Runtimes, ", "))
}

// dockerdPath is the PATH dockerd started with, read from its environ
// under the proc root; false when it cannot be read (another user's
// process, no proc root).
func (s *state) dockerdPath() ([]string, bool) {
	entries, err := fs.ReadDir(s.Proc, ".")
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := fs.ReadFile(s.Proc, e.Name()+"/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
			continue
		}
		env, err := fs.ReadFile(s.Proc, e.Name()+"/environ")
		if err != nil {
			return nil, false
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("PATH=")); ok {
				return strings.Split(string(v), ":"), true
			}
		}
		// No PATH: dockerd searches the default one.
		return []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, true
	}
	return nil, false
}

func checkDefaultRuntime(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable")
	}
	if in.DefaultRuntime != "nvidia" {
		return pass("%s", in.DefaultRuntime)
	}
	if s.toolkit.read && !s.toolkit.acceptEnvvar {
		return pass("nvidia, with accept-nvidia-visible-devices-envvar-when-unprivileged = false")
	}
	return warn("set accept-nvidia-visible-devices-envvar-when-unprivileged = false in /"+toolkitConfigPath+" (GPUs then come only from --gpus), or drop default-runtime from /"+daemonJSON,
		"default-runtime is nvidia: CUDA images set NVIDIA_VISIBLE_DEVICES=all, so every such container sees every GPU, bypassing --gpus and gpumeter's queue")
}

// apiAtLeast says whether API version v is at least major.minor.
func apiAtLeast(v string, major, minor int) bool {
	var a, b int
	if _, err := fmt.Sscanf(v, "%d.%d", &a, &b); err != nil {
		return false
	}
	return a > major || a == major && b >= minor
}
