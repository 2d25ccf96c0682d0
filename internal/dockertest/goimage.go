package dockertest

import (
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"sync"
	"testing"

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
	img.once.Do(func() { img.err = buildGoImage(cli, tag, "bin", source, dockerfile) })
	if img.err != nil {
		t.Fatalf("build %s: %v", tag, img.err)
	}
	return tag
}
