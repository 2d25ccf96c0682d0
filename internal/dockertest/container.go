package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

const (
	// Label is set to "1" on every test container and on the test image.
	Label = "gpumeter.test"
	// SleeperExitCode is what the sleeper exits with on SIGTERM, so that a
	// recorded exit code is never a default zero.
	SleeperExitCode = 3

	// opTimeout bounds one Docker call; an engine on a busy machine can
	// take seconds to create or start a container.
	opTimeout = time.Minute
)

// run names this process's test containers, so that parallel test
// binaries on one engine never touch each other's.
var run = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// Spec describes a test container of the sleeper image.
type Spec struct {
	Name       string // suffix of the container's name
	Labels     map[string]string
	User       string // Config.User
	Env        []string
	Cmd        []string // "ignore-term" makes the sleeper ignore SIGTERM; see sleeperSource for the rest
	HostConfig *mcontainer.HostConfig
	CreateOnly bool // create, do not start
}

// Container creates (and unless s.CreateOnly, starts) a sleeper container
// named gpumeter-test-<run>-<s.Name> and labelled Label=1. It is removed
// when the test ends, pass or fail.
func Container(t testing.TB, cli *client.Client, s Spec) (id, name string) {
	t.Helper()
	labels := map[string]string{Label: "1"}
	maps.Copy(labels, s.Labels)
	name = "gpumeter-test-" + run + "-" + s.Name
	img := SleeperImage(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     &mcontainer.Config{Image: img, User: s.User, Env: s.Env, Cmd: s.Cmd, Labels: labels},
		HostConfig: s.HostConfig,
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { Remove(t, cli, res.ID) })
	if !s.CreateOnly {
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		if len(s.Cmd) > 0 && s.Cmd[0] == "ignore-term" {
			awaitIgnoringTerm(t, cli, res.ID)
		}
	}
	return res.ID, name
}

// IgnoringTerm is what the sleeper prints once it ignores SIGTERM.
const IgnoringTerm = "ignoring SIGTERM"

// awaitIgnoringTerm waits until the sleeper of container id ignores
// SIGTERM: a stop sent before then meets the Go runtime's own handling,
// which exits 2 at once, and a test of a stop's grace would see no grace.
func awaitIgnoringTerm(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	WaitFor(t, opTimeout, "the sleeper to ignore SIGTERM", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true})
		if err != nil {
			return false, err.Error()
		}
		defer rc.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(rc)
		return strings.Contains(b.String(), IgnoringTerm), fmt.Sprintf("logs so far %q", b.String())
	})
}

// Remove removes a container by force; one that is already gone is fine.
func Remove(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove container %.12s: %v", id, err)
	}
}

// Inspect returns what the engine says about a container.
func Inspect(t testing.TB, cli *client.Client, id string) mcontainer.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %.12s: %v", id, err)
	}
	return res.Container
}

const sleeperSource = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// The container's main process. With no argument it waits for SIGTERM
// and exits 3. With ignore-term it ignores SIGTERM until it is killed.
// With exit-after DURATION CODE [LINE...] it prints each LINE, waits
// DURATION (SIGTERM still exits 3) and exits CODE; $NAME in CODE and in
// the lines is the variable's value (a queue's GPUMETER_ARRAY_INDEX,
// say). With print-every DURATION TEXT it prints TEXT and a count every
// DURATION until SIGTERM.
func main() {
	if len(os.Args) > 1 && os.Args[1] == "ignore-term" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		fmt.Println("ignoring SIGTERM")
		for {
			time.Sleep(time.Hour)
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) > 3 && os.Args[1] == "exit-after" {
		for i := 3; i < len(os.Args); i++ {
			os.Args[i] = os.ExpandEnv(os.Args[i])
		}
		d, err1 := time.ParseDuration(os.Args[2])
		code, err2 := strconv.Atoi(os.Args[3])
		if err1 != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "usage: exit-after DURATION CODE [LINE...]")
			os.Exit(64)
		}
		for _, line := range os.Args[4:] {
			fmt.Println(line)
		}
		select {
		case <-c:
			os.Exit(3)
		case <-time.After(d):
			os.Exit(code)
		}
	}
	if len(os.Args) > 3 && os.Args[1] == "print-every" {
		d, err := time.ParseDuration(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: print-every DURATION TEXT")
			os.Exit(64)
		}
		tick := time.NewTicker(d)
		for n := 1; ; n++ {
			fmt.Println(os.Args[3], n)
			select {
			case <-c:
				os.Exit(3)
			case <-tick.C:
			}
		}
	}
	<-c
	os.Exit(3)
}
`

var built struct {
	once sync.Once
	err  error
}

// sleeperDockerfile is the sleeper image's Dockerfile.
const sleeperDockerfile = "FROM scratch\nCOPY sleeper /sleeper\nENTRYPOINT [\"/sleeper\"]\n"

// sleeperImage is the sleeper image's tag. It names the source the image
// is built from, so that a test binary finds the image another built
// from the same source, and builds none.
var sleeperImage = func() string {
	sum := sha256.Sum256([]byte(sleeperSource + sleeperDockerfile + runtime.GOARCH))
	return "gpumeter-test-sleeper:" + hex.EncodeToString(sum[:6])
}()

// SleeperImage builds the sleeper image once per test binary, unless the
// engine has it from the same source, and returns its tag: FROM scratch
// with a static Go binary, so no registry is needed.
func SleeperImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	built.once.Do(func() { built.err = buildSleeper(cli) })
	if built.err != nil {
		t.Fatalf("build %s: %v", sleeperImage, built.err)
	}
	return sleeperImage
}

func buildSleeper(cli *client.Client) error {
	return buildGoImage(cli, sleeperImage, "sleeper", sleeperSource, sleeperDockerfile)
}

// buildGoImage builds tag, unless the engine has it, from dockerfile and
// the static Go program source compiled to bin: FROM scratch, so no
// registry is needed.
func buildGoImage(cli *client.Client, tag, bin, source, dockerfile string) error {
	if have, err := hasImage(cli, tag); err != nil || have {
		return err
	}
	dir, err := os.MkdirTemp("", "gpumeter-"+bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"main.go": source,
		"go.mod":  "module " + bin + "\n\ngo 1.22\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go tool is needed to build the test image: %w", err)
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	body, err := os.ReadFile(filepath.Join(dir, bin))
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile)},
		{bin, 0o755, body},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{Label: "1"},
	})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return StreamError(res.Body)
}

// StreamError reads the JSON message stream of an image build, import or
// pull to its end and returns the error it reports: those calls report
// failure inside the stream, not as an HTTP error.
func StreamError(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the engine's output: %w", err)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// hasImage says whether the engine has the image tag; a test image's tag
// names the source it was built from.
func hasImage(cli *client.Client, tag string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := cli.ImageInspect(ctx, tag)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect %s: %w", tag, err)
	}
	return true, nil
}
