package doctor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

var binDirs = []string{"usr/bin", "usr/local/bin", "usr/sbin", "bin", "sbin"}

// findBinary is the path of name in the usual bin directories, "" when absent.
func (s *state) findBinary(name string) string {
	for _, d := range binDirs {
		p := path.Join(d, name)
		if s.exists(p) {
			return p
		}
	}
	return ""
}

const installToolkit = "install the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then `nvidia-ctk runtime configure --runtime=docker` and `systemctl restart docker`"

func checkToolkit(_ context.Context, s *state) Result {
	var missing, found []string
	for _, b := range []string{"nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime-hook"} {
		if p := s.findBinary(b); p != "" {
			found = append(found, s.hostPath(p))
		} else {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fail(installToolkit, "not found in %s: %s", strings.Join(binDirs, ", "), strings.Join(missing, ", "))
	}
	return pass("%s", strings.Join(found, ", "))
}

// dpkgVersion is the version dpkg's status file records for pkg.
func dpkgVersion(data []byte, pkg string) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			in = false
		case strings.HasPrefix(line, "Package: "):
			in = strings.TrimPrefix(line, "Package: ") == pkg
		case in && strings.HasPrefix(line, "Version: "):
			return strings.TrimPrefix(line, "Version: ")
		}
	}
	return ""
}

var semver = regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)`)

// parseVersion reads the first x.y.z in s.
func parseVersion(s string) ([3]int, bool) {
	m := semver.FindStringSubmatch(s)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range 3 {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, true
}

func less(a, b [3]int) bool {
	for i := range 3 {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func (s *state) toolkitVersion(ctx context.Context) (version, from string) {
	if data, err := fs.ReadFile(s.Root, "var/lib/dpkg/status"); err == nil {
		for _, pkg := range []string{"nvidia-container-toolkit", "nvidia-container-toolkit-base"} {
			if v := dpkgVersion(data, pkg); v != "" {
				return v, "dpkg: " + pkg
			}
		}
	}
	if s.ToolVersion != nil {
		if p := s.findBinary("nvidia-ctk"); p != "" {
			if out, err := s.ToolVersion(ctx, path.Join(s.RootPath, p)); err == nil {
				return out, s.hostPath(p) + " --version"
			}
		}
	}
	return "", ""
}

func checkToolkitVersion(ctx context.Context, s *state) Result {
	raw, from := s.toolkitVersion(ctx)
	if raw == "" {
		if s.findBinary("nvidia-ctk") == "" {
			return skip("toolkit not installed")
		}
		return warn("run `nvidia-ctk --version` and compare with "+advisories[len(advisories)-1].FixedIn, "the installed version could not be read (no dpkg record)")
	}
	v, ok := parseVersion(raw)
	if !ok {
		return warn("run `nvidia-ctk --version`", "%s: no version in %q", from, raw)
	}
	var open []string
	need := ""
	for _, a := range advisories {
		fixed, _ := parseVersion(a.FixedIn)
		if less(v, fixed) {
			open = append(open, fmt.Sprintf("%s (%s, fixed in %s)", a.CVE, a.Summary, a.FixedIn))
			need = a.FixedIn
		}
	}
	ver := fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	if len(open) > 0 {
		return fail(fmt.Sprintf("upgrade the NVIDIA Container Toolkit to %s or later (`apt-get install --only-upgrade nvidia-container-toolkit` or `dnf upgrade nvidia-container-toolkit`)", need),
			"%s (%s) is open to container escapes: %s", ver, from, strings.Join(open, "; "))
	}
	return pass("%s (%s): every known escape fixed (advisories as of %s)", ver, from, advisoriesAsOf)
}

const toolkitConfigPath = "etc/nvidia-container-runtime/config.toml"

// toolkitConfig is the part of config.toml the checks read.
type toolkitConfig struct {
	read      bool
	noCgroups bool
	// acceptEnvvar is accept-nvidia-visible-devices-envvar-when-unprivileged
	// (true when unset, as the toolkit defaults it).
	acceptEnvvar bool
}

var knownSections = map[string]bool{
	"nvidia-container-cli": true, "nvidia-container-runtime": true, "nvidia-container-runtime-hook": true,
	"nvidia-ctk": true, "nvidia-container-runtime.modes": true, "nvidia-container-runtime.modes.cdi": true,
	"nvidia-container-runtime.modes.csv": true, "nvidia-container-runtime.modes.legacy": true,
	"nvidia-container-runtime.modes.jit-cdi": true,
}

var sectionHeader = regexp.MustCompile(`^\s*\[\s*([^\]]+?)\s*\]`)

func checkToolkitConfig(_ context.Context, s *state) Result {
	p := s.hostPath(toolkitConfigPath)
	data, err := fs.ReadFile(s.Root, toolkitConfigPath)
	if err != nil {
		if s.findBinary("nvidia-ctk") == "" {
			return skip("%s: %v", p, unwrapPath(err))
		}
		return warn("`nvidia-ctk config default --output="+p+"`", "%s: %v", p, unwrapPath(err))
	}
	var cfg struct {
		AcceptEnvvarUnprivileged *bool `toml:"accept-nvidia-visible-devices-envvar-when-unprivileged"`
		CLI                      struct {
			Ldconfig  string `toml:"ldconfig"`
			NoCgroups bool   `toml:"no-cgroups"`
		} `toml:"nvidia-container-cli"`
	}
	if _, err := toml.Decode(string(data), &cfg); err != nil {
		line := 0
		if pe, ok := err.(toml.ParseError); ok {
			line = pe.Position.Line
		}
		return fail("correct the file, or write a fresh one with `nvidia-ctk config default --output="+p+"`", "%s:%d: %v", p, line, err)
	}
	s.toolkit = toolkitConfig{read: true, noCgroups: cfg.CLI.NoCgroups, acceptEnvvar: cfg.AcceptEnvvarUnprivileged == nil || *cfg.AcceptEnvvarUnprivileged}
	for i, line := range strings.Split(string(data), "\n") {
		if m := sectionHeader.FindStringSubmatch(line); m != nil && !knownSections[m[1]] {
			return warn("remove or rename the section; `nvidia-ctk config default` lists the known ones", "%s:%d: unknown section [%s]: the toolkit ignores it", p, i+1, m[1])
		}
	}
	if ld := cfg.CLI.Ldconfig; ld != "" {
		host := strings.TrimPrefix(ld, "@")
		if !s.exists(strings.TrimPrefix(host, "/")) {
			return fail("set ldconfig in [nvidia-container-cli] to this host's ldconfig (`@/sbin/ldconfig` on Debian and Ubuntu, `@/sbin/ldconfig.real` where that exists)",
				"%s: ldconfig %q: %s does not exist: containers start without the driver's libraries in their linker cache", p, ld, host)
		}
	}
	return pass("%s parses; ldconfig %q", p, cfg.CLI.Ldconfig)
}
