package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// goImages are the images GoImage built in this test binary, by tag.
var goImages sync.Map // tag -> *goImage

type goImage struct {
	once sync.Once
	err  error
}

// GoImage builds, once per test binary and source, a FROM scratch image
// named repo whose entrypoint is source (a main package with no
// dependencies beyond the standard library) built static, as the sleeper
// is, and returns its tag (repo:<hash of the source>). The engine needs
// no registry for it.
func GoImage(t testing.TB, cli *client.Client, repo, source string) string {
	t.Helper()
	const dockerfile = "FROM scratch\nCOPY bin /bin\nENTRYPOINT [\"/bin\"]\n"
	sum := sha256.Sum256([]byte(source + dockerfile + runtime.GOARCH))
	tag := repo + ":" + hex.EncodeToString(sum[:6])
	v, _ := goImages.LoadOrStore(tag, &goImage{})
	img := v.(*goImage)
	img.once.Do(func() { img.err = buildGoImage(cli, tag, source, dockerfile) })
	if img.err != nil {
		t.Fatalf("build %s: %v", tag, img.err)
	}
	return tag
}

func buildGoImage(cli *client.Client, tag, source, dockerfile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect %s: %w", tag, err)
	}
	dir, err := os.MkdirTemp("", "gpumeter-goimage")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for name, body := range map[string]string{"main.go": source, "go.mod": "module testbin\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go tool is needed to build the test image: %w", err)
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", "bin", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{{"Dockerfile", 0o644, []byte(dockerfile)}, {"bin", 0o755, bin}} {
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
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, Labels: map[string]string{Label: "1"},
	})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return StreamError(res.Body)
}
