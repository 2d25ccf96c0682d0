package spec

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostTree is a mount root in t.TempDir() with files of known modes. The
// test process owns them all, and the submitter in the tests is uid 4242,
// so only the "other" permission bits speak for the submitter.
type hostTree struct {
	root string // the mount root
	out  string // a directory beside it, outside every root
}

func newHostTree(t testing.TB) hostTree {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir makes its directories 0700; the submitter must be able
	// to reach the root, as on a real host.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := hostTree{root: filepath.Join(dir, "data"), out: filepath.Join(dir, "secret")}
	mkdir := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	mkdir(h.root, 0o755)
	mkdir(h.out, 0o755)
	mkdir(filepath.Join(h.root, "shared"), 0o755)
	mkdir(filepath.Join(h.root, "scratch"), 0o777)
	mkdir(filepath.Join(h.root, "private"), 0o700)
	mkdir(filepath.Join(h.root, "locked"), 0o700)
	mkdir(filepath.Join(h.root, "locked", "open"), 0o777)
	if err := os.WriteFile(filepath.Join(h.root, "shared", "weights.bin"), []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.root, "key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink out of the root, and one that stays inside it.
	if err := os.Symlink(h.out, filepath.Join(h.root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(h.root, "slash")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("shared", filepath.Join(h.root, "models")); err != nil {
		t.Fatal(err)
	}
	return h
}

func testRules(root string) Rules {
	return Rules{
		Images:          []string{"nvcr.io/nvidia/*", "localhost/job:*"},
		MountRoots:      []string{root},
		MaxGPUs:         8,
		MaxGPUMemory:    60 << 30,
		MaxCPUs:         16,
		MaxMemory:       64 << 30,
		MaxShmSize:      8 << 30,
		MaxTimeLimit:    72 * time.Hour,
		PublishPorts:    []PortRange{{8000, 8099}},
		CapAdd:          []string{"SYS_NICE"},
		RunAsRootImages: []string{"localhost/job:root"},
		Labels:          []string{"gpumeter.project", "gpumeter.sim.*"},
	}
}

func testRequest() Request {
	return Request{
		GPUs:      2,
		TimeLimit: 4 * time.Hour,
		Image:     "nvcr.io/nvidia/pytorch:24.05-py3",
		Command:   []string{"python", "train.py"},
	}
}

var alice = Identity{UID: 4242, GID: 4242, Groups: []uint32{4242, 2000}, User: "alice", Team: "ml"}

func TestCheckRefuses(t *testing.T) {
	h := newHostTree(t)
	in := func(p string) string { return filepath.Join(h.root, p) }
	tests := []struct {
		name   string
		edit   func(*Request, *Identity, *Rules)
		reason Reason
		field  string
		text   string // a part of the message: the rule, or the fix
	}{
		{"zero GPUs", func(r *Request, _ *Identity, _ *Rules) { r.GPUs = 0 }, BadRequest, "gpus", "--gpus N with N > 0"},
		{"negative GPUs", func(r *Request, _ *Identity, _ *Rules) { r.GPUs = -1 }, BadRequest, "gpus", "at least 1 GPU"},
		{"more GPUs than the maximum", func(r *Request, _ *Identity, _ *Rules) { r.GPUs = 9 }, TooBig, "gpus", "queue.max_gpus (8)"},
		{"GPUs and GPU memory", func(r *Request, _ *Identity, _ *Rules) { r.GPUMemory = 20 << 30 }, BadRequest, "gpus", "--gpus and --gpu-memory together"},
		{"GPU memory over the shared GPUs'", func(r *Request, _ *Identity, _ *Rules) { r.GPUs, r.GPUMemory = 0, 60<<30+1 }, TooBig, "gpu_memory", "more than any shared GPU can give (60GiB"},
		{"GPU memory with no shared GPU", func(r *Request, _ *Identity, u *Rules) { r.GPUs, r.GPUMemory, u.MaxGPUMemory = 0, 1<<30, 0 }, TooBig, "gpu_memory", "queue.shared_gpus is empty"},
		{"unknown class", func(r *Request, _ *Identity, _ *Rules) { r.Class = "urgent" }, BadRequest, "priority", `"urgent" is not a priority class; give --priority low, normal, high`},
		{"class in capitals", func(r *Request, _ *Identity, _ *Rules) { r.Class = "High" }, BadRequest, "priority", "not a priority class"},
		{"high without the right", func(r *Request, _ *Identity, _ *Rules) { r.Class = ClassHigh }, PriorityNotAllowed, "priority", "alice may not submit with --priority high"},
		{"time limit 0", func(r *Request, _ *Identity, _ *Rules) { r.TimeLimit = 0 }, BadRequest, "time_limit", "--time-limit"},
		{"negative time limit", func(r *Request, _ *Identity, _ *Rules) { r.TimeLimit = -time.Second }, BadRequest, "time_limit", "above 0"},
		{"time limit over the maximum", func(r *Request, _ *Identity, _ *Rules) { r.TimeLimit = 73 * time.Hour }, TimeLimitTooLong, "time_limit", "queue.max_time_limit (3d)"},
		{"time limit of 1ns", func(r *Request, _ *Identity, u *Rules) { r.TimeLimit, u.MinTimeLimit = 1, time.Minute }, TimeLimitTooShort, "time_limit", "1ns is shorter than queue.min_time_limit (1m): the job would end before it started; give --time-limit 1m or more"},
		{"time limit under the minimum", func(r *Request, _ *Identity, u *Rules) { r.TimeLimit, u.MinTimeLimit = 59*time.Second, time.Minute }, TimeLimitTooShort, "time_limit", "queue.min_time_limit"},
		{"empty command", func(r *Request, _ *Identity, _ *Rules) { r.Command = nil }, BadRequest, "command", "after --"},
		{"empty program", func(r *Request, _ *Identity, _ *Rules) { r.Command = []string{""} }, BadRequest, "command", "empty"},
		{"NUL in an argument", func(r *Request, _ *Identity, _ *Rules) { r.Command = []string{"sh", "a\x00b"} }, BadRequest, "command", "NUL"},
		{"bad name", func(r *Request, _ *Identity, _ *Rules) { r.Name = "my job" }, BadRequest, "name", "letters, digits"},
		{"no image", func(r *Request, _ *Identity, _ *Rules) { r.Image = "" }, BadRequest, "image", "--image"},
		{"image like a flag", func(r *Request, _ *Identity, _ *Rules) { r.Image = "--privileged" }, ImageInvalid, "image", "not an image reference"},
		{"image with ..", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/x/../../evil" }, ImageInvalid, "image", "not an image reference Docker takes"},
		{"repository in capitals", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/PyTorch:24.05-py3" }, ImageInvalid, "image", "must be lowercase"},
		{"fullwidth tag", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/pytorch:２４" }, ImageInvalid, "image", "a tag of letters, digits"},
		{"short digest", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/pytorch@sha256:abc" }, ImageInvalid, "image", "64 hex digits"},
		{"digest in capitals", func(r *Request, _ *Identity, _ *Rules) {
			r.Image = "nvcr.io/nvidia/pytorch@sha256:" + strings.Repeat("A", 64)
		}, ImageInvalid, "image", "not an image reference Docker takes"},
		{"digest of an unknown algorithm", func(r *Request, _ *Identity, _ *Rules) {
			r.Image = "nvcr.io/nvidia/pytorch@md5:" + strings.Repeat("a", 32)
		}, ImageInvalid, "image", "not an image reference Docker takes"},
		{"empty tag", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/pytorch:" }, ImageInvalid, "image", "not an image reference Docker takes"},
		{"tag too long", func(r *Request, _ *Identity, _ *Rules) {
			r.Image = "nvcr.io/nvidia/pytorch:" + strings.Repeat("a", 129)
		}, ImageInvalid, "image", "not an image reference Docker takes"},
		{"image outside the patterns", func(r *Request, _ *Identity, _ *Rules) { r.Image = "docker.io/evil/miner:latest" }, ImageNotAllowed, "image", "matches none of queue.images (nvcr.io/nvidia/*, localhost/job:*)"},
		{"glob does not cross /", func(r *Request, _ *Identity, _ *Rules) { r.Image = "nvcr.io/nvidia/x/evil" }, ImageNotAllowed, "image", "queue.images"},
		{"no patterns", func(_ *Request, _ *Identity, u *Rules) { u.Images = nil }, ImageNotAllowed, "image", "queue.images is empty"},
		{"uid 0 without run_as_root", func(_ *Request, w *Identity, _ *Rules) { w.UID = 0 }, ImageNotAllowed, "image", "queue.run_as_root_images"},
		{"uid 0 with another image", func(r *Request, w *Identity, _ *Rules) { w.UID, r.Image = 0, "localhost/job:latest" }, ImageNotAllowed, "image", "run as root"},
		{"NVIDIA_VISIBLE_DEVICES=all", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"NVIDIA_VISIBLE_DEVICES=all"} }, EnvNotAllowed, "env", "drop --env NVIDIA_VISIBLE_DEVICES"},
		{"NVIDIA_DRIVER_CAPABILITIES", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"NVIDIA_DRIVER_CAPABILITIES=all"} }, EnvNotAllowed, "env", "NVIDIA_*"},
		{"the preemption grace", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"gpumeter_preempt_grace=99999"} }, EnvNotAllowed, "env", "queue.preempt_grace"},
		{"preemptible memory job", func(r *Request, _ *Identity, u *Rules) {
			r.GPUs, r.GPUMemory, r.Preemptible, u.MaxGPUMemory = 0, 1<<30, true, 10<<30
		}, BadRequest, "preemptible", "cannot be preemptible"},
		{"any NVIDIA_ name", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"A=1", "NVIDIA_REQUIRE_CUDA=cuda>=1"} }, EnvNotAllowed, "env", "NVIDIA_REQUIRE_CUDA"},
		{"lower-case nvidia_", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"nvidia_visible_devices=all"} }, EnvNotAllowed, "env", "set by the queue"},
		{"CUDA_VISIBLE_DEVICES", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"} }, EnvNotAllowed, "env", "CUDA_VISIBLE_DEVICES"},
		{"CUDA_DEVICE_ORDER", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"CUDA_DEVICE_ORDER=FASTEST_FIRST"} }, EnvNotAllowed, "env", "set by the queue"},
		{"env without =", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"DEBUG"} }, BadRequest, "env", "KEY=VALUE"},
		{"env name with a digit first", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"1X=2"} }, BadRequest, "env", "not a variable name"},
		{"env name with a space", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"A B=2"} }, BadRequest, "env", "not a variable name"},
		{"env twice", func(r *Request, _ *Identity, _ *Rules) { r.Env = []string{"A=1", "A=2"} }, BadRequest, "env", "twice"},
		{"relative workdir", func(r *Request, _ *Identity, _ *Rules) { r.Workdir = "src" }, BadRequest, "workdir", "absolute"},
		{"mount of /", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{"/:/host"} }, MountNotAllowed, "mounts", "outside queue.mount_roots"},
		{"root that is a link to /", func(r *Request, _ *Identity, u *Rules) {
			r.Mounts, u.MountRoots = []string{in("slash") + "/etc:/etc:ro"}, []string{in("slash")}
		}, MountNotAllowed, "mounts", "resolved to /etc"},
		{"no probing outside the roots", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{"/nonexistent/x:/x:ro"} }, MountNotAllowed, "mounts", "outside queue.mount_roots"},
		{"mount of /etc", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{"/etc:/etc:ro"} }, MountNotAllowed, "mounts", "mount a path under one of them"},
		{"symlink out of the root", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("escape") + ":/data"} }, MountNotAllowed, "mounts", "resolved to " + h.out},
		{"symlink to /", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("slash") + ":/data:ro"} }, MountNotAllowed, "mounts", "resolved to /)"},
		{".. escape", func(r *Request, _ *Identity, _ *Rules) {
			r.Mounts = []string{h.root + "/shared/../../secret" + ":/data"}
		}, MountNotAllowed, "mounts", "holds .."},
		{".. inside the root", func(r *Request, _ *Identity, _ *Rules) {
			r.Mounts = []string{h.root + "/private/../shared" + ":/data:ro"}
		}, MountNotAllowed, "mounts", "without .."},
		{".. in the target", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":/data/../etc:ro"} }, MountNotAllowed, "mounts", "holds .."},
		{"relative source", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{"data:/data"} }, BadRequest, "mounts", "absolute path"},
		{"relative target", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":data"} }, BadRequest, "mounts", "absolute path"},
		{"mount without a target", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared")} }, BadRequest, "mounts", "SRC:DST"},
		{"mount with a bad mode", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":/d:rshared"} }, BadRequest, "mounts", "SRC:DST:ro"},
		{"mount with options smuggled", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":/d,readonly=false"} }, BadRequest, "mounts", "comma"},
		{"mount over /", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":/:ro"} }, BadRequest, "mounts", "container's /"},
		{"mount over /proc", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("scratch") + ":/proc/sys"} }, BadRequest, "mounts", "container's /proc"},
		{"mount over /dev", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("scratch") + ":/dev"} }, BadRequest, "mounts", "runtime owns"},
		{"two mounts on one target", func(r *Request, _ *Identity, _ *Rules) {
			r.Mounts = []string{in("shared") + ":/d:ro", in("scratch") + ":/d"}
		}, BadRequest, "mounts", "share the target"},
		{"missing source", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("nothing") + ":/d"} }, MountNotAllowed, "mounts", "cannot be resolved"},
		{"no mount roots", func(r *Request, _ *Identity, u *Rules) {
			r.Mounts, u.MountRoots = []string{in("shared") + ":/d:ro"}, nil
		}, MountNotAllowed, "mounts", "queue.mount_roots is empty"},
		{"unreadable for the uid", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("private") + ":/d:ro"} }, MountNotAllowed, "mounts", "uid 4242 may not read"},
		{"unreadable file for the uid", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("key") + ":/key:ro"} }, MountNotAllowed, "mounts", "mode -rw-------"},
		{"read-write without write access", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("shared") + ":/d"} }, MountNotAllowed, "mounts", "or add :ro"},
		{"open directory in a locked one", func(r *Request, _ *Identity, _ *Rules) { r.Mounts = []string{in("locked/open") + ":/d"} }, MountNotAllowed, "mounts", "may not enter " + in("locked")},
		{"port outside the range", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"9000"} }, PortNotAllowed, "publish", "queue.publish_ports (8000-8099)"},
		{"privileged host port", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"80:80"} }, PortNotAllowed, "publish", "host port 80"},
		{"no publish ports", func(r *Request, _ *Identity, u *Rules) { r.Publish, u.PublishPorts = []string{"8000"}, nil }, PortNotAllowed, "publish", "no port may be published"},
		{"port 0", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"0"} }, BadRequest, "publish", "PORT:CPORT"},
		{"port too high", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"8000:70000"} }, BadRequest, "publish", "65535"},
		{"port with an address", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"0.0.0.0:8000:8000"} }, BadRequest, "publish", "PORT or PORT:CPORT"},
		{"port twice", func(r *Request, _ *Identity, _ *Rules) { r.Publish = []string{"8000:1", "8000:2"} }, BadRequest, "publish", "twice"},
		{"too many CPUs", func(r *Request, _ *Identity, _ *Rules) { r.CPUs = 17 }, TooBig, "cpus", "queue.max_cpus (16)"},
		{"negative CPUs", func(r *Request, _ *Identity, _ *Rules) { r.CPUs = -1 }, BadRequest, "cpus", "--cpus"},
		{"NaN CPUs", func(r *Request, _ *Identity, _ *Rules) { r.CPUs = math.NaN() }, BadRequest, "cpus", "above 0"},
		{"too much memory", func(r *Request, _ *Identity, _ *Rules) { r.Memory = 65 << 30 }, TooBig, "memory", "queue.max_memory (64GiB)"},
		{"too little memory", func(r *Request, _ *Identity, _ *Rules) { r.Memory = 1 << 20 }, BadRequest, "memory", "6MiB"},
		{"too much shm", func(r *Request, _ *Identity, _ *Rules) { r.ShmSize = 9 << 30 }, TooBig, "shm_size", "queue.max_shm_size (8GiB)"},
		{"more pids than the maximum", func(r *Request, _ *Identity, _ *Rules) { r.Pids = 4097 }, TooBig, "pids", "queue.max_pids (4096); give --pids 4096 or less"},
		{"more pids than a lowered maximum", func(r *Request, _ *Identity, rl *Rules) { r.Pids, rl.MaxPids = 129, 128 }, TooBig, "pids", "queue.max_pids (128)"},
		{"negative pids", func(r *Request, _ *Identity, _ *Rules) { r.Pids = -1 }, BadRequest, "pids", "--pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, who, rules := testRequest(), alice, testRules(h.root)
			who.Groups = slices.Clone(alice.Groups)
			tt.edit(&req, &who, &rules)
			err := Check(req, rules, who)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Check: %v, want a refusal %s", err, tt.reason)
			}
			if r.Reason != tt.reason || r.Field != tt.field {
				t.Errorf("refusal %s on %s (%s), want %s on %s", r.Reason, r.Field, r.Text, tt.reason, tt.field)
			}
			if !strings.Contains(r.Text, tt.text) {
				t.Errorf("refusal text %q does not say %q", r.Text, tt.text)
			}
			if !slices.Contains(Reasons, r.Reason) {
				t.Errorf("reason %q is not in Reasons", r.Reason)
			}
		})
	}
}

func TestCheckAccepts(t *testing.T) {
	h := newHostTree(t)
	in := func(p string) string { return filepath.Join(h.root, p) }
	tests := []struct {
		name string
		edit func(*Request, *Identity)
	}{
		{"plain", func(*Request, *Identity) {}},
		{"every field", func(r *Request, _ *Identity) {
			r.Name = "resnet-50.v2"
			r.Env = []string{"WANDB_MODE=offline", "EMPTY=", "EQ=a=b"}
			r.Mounts = []string{in("shared") + ":/data:ro", in("scratch") + ":/scratch", in("shared/weights.bin") + ":/w.bin:ro"}
			r.Workdir = "/scratch"
			r.CPUs, r.Memory, r.ShmSize = 16, 64<<30, 8<<30
			r.Publish = []string{"8088", "8099:6006"}
			r.TimeLimit = 72 * time.Hour
			r.GPUs = 8
		}},
		{"GPU memory at the edge", func(r *Request, _ *Identity) { r.GPUs, r.GPUMemory = 0, 60<<30 }},
		{"image by digest", func(r *Request, _ *Identity) { r.Image = "nvcr.io/nvidia/pytorch@sha256:" + strings.Repeat("0a", 32) }},
		{"image by tag and digest", func(r *Request, _ *Identity) {
			r.Image = "nvcr.io/nvidia/pytorch:24.05-py3@sha256:" + strings.Repeat("0a", 32)
		}},
		{"tag in capitals", func(r *Request, _ *Identity) { r.Image = "nvcr.io/nvidia/pytorch:LATEST_v2.1-x" }},
		{"time limit at the minimum", func(r *Request, _ *Identity) { r.TimeLimit = time.Minute }},
		{"GPU memory, one byte", func(r *Request, _ *Identity) { r.GPUs, r.GPUMemory = 0, 1 }},
		{"low and normal", func(r *Request, _ *Identity) { r.Class = ClassLow }},
		{"normal", func(r *Request, _ *Identity) { r.Class = ClassNormal }},
		{"high for a high user", func(r *Request, w *Identity) { r.Class, w.High = ClassHigh, true }},
		{"symlink inside the root", func(r *Request, _ *Identity) { r.Mounts = []string{in("models") + ":/models:ro"} }},
		{"the root itself", func(r *Request, _ *Identity) { r.Mounts = []string{h.root + "/:/data:ro"} }},
		{"root with its image", func(r *Request, w *Identity) { w.UID, r.Image = 0, "localhost/job:root" }},
		{"private directory of its owner", func(r *Request, w *Identity) {
			w.UID = uint32(os.Getuid())
			r.Image = "localhost/job:root"
			r.Mounts = []string{in("private") + ":/d"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, who := testRequest(), alice
			tt.edit(&req, &who)
			if err := Check(req, testRules(h.root), who); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
}

func TestRulesValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Rules)
		want string
	}{
		{"host network", func(r *Rules) { r.Network = "host" }, "queue.network"},
		{"another container's network", func(r *Rules) { r.Network = "container:db" }, "queue.network"},
		{"mount root /", func(r *Rules) { r.MountRoots = []string{"/"} }, "every host path"},
		{"relative mount root", func(r *Rules) { r.MountRoots = []string{"data"} }, "absolute"},
		{"bad pattern", func(r *Rules) { r.Images = []string{"nvcr.io/["} }, "queue.images"},
		{"bad label pattern", func(r *Rules) { r.Labels = []string{"gpumeter.[sim"} }, "queue.labels"},
		{"empty port range", func(r *Rules) { r.PublishPorts = []PortRange{{9000, 8000}} }, "queue.publish_ports"},
		{"publish address", func(r *Rules) { r.PublishAddress = "localhost" }, "queue.publish_address"},
		{"infinite CPUs", func(r *Rules) { r.MaxCPUs = math.Inf(1) }, "queue.max_cpus"},
		{"memory past int64", func(r *Rules) { r.MaxMemory = 1 << 63 }, "max_memory"},
		{"capability ALL", func(r *Rules) { r.CapAdd = []string{"ALL"} }, "queue.cap_add"},
		{"negative pids", func(r *Rules) { r.MaxPids = -1 }, "queue.max_pids"},
		{"pids past the kernel's", func(r *Rules) { r.MaxPids = MostPids + 1 }, "queue.max_pids"},
		{"negative open files", func(r *Rules) { r.MaxOpenFiles = -1 }, "queue.max_open_files"},
		{"open files past nr_open", func(r *Rules) { r.MaxOpenFiles = MostOpenFiles + 1 }, "queue.max_open_files"},
		{"isolated not resolved", func(r *Rules) { r.Network = IsolatedNetwork }, "gpumeter-jobs-NODE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := testRules("/srv")
			tt.edit(&rules)
			err := rules.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an error naming %s", err, tt.want)
			}
			var r *Refusal
			if err := Check(testRequest(), rules, alice); err == nil || errors.As(err, &r) {
				t.Errorf("Check with bad rules: %v, want the rules' error, not a refusal", err)
			}
		})
	}
	if err := testRules("/srv").Validate(); err != nil {
		t.Errorf("Validate of the test rules: %v", err)
	}
	if err := (Rules{}).Validate(); err != nil {
		t.Errorf("Validate of zero rules: %v", err)
	}
}

func TestMayAccess(t *testing.T) {
	file := func(mode os.FileMode, uid, gid uint32) fileStat { return fileStat{Mode: mode, UID: uid, GID: gid} }
	who := Identity{UID: 1000, GID: 100, Groups: []uint32{100, 27}}
	tests := []struct {
		name string
		st   fileStat
		want os.FileMode
		ok   bool
	}{
		{"owner reads", file(0o600, 1000, 0), permRead, true},
		{"owner writes", file(0o600, 1000, 0), permRead | permWrite, true},
		{"owner class decides, not other", file(0o077, 1000, 0), permRead, false},
		{"primary group reads", file(0o640, 0, 100), permRead, true},
		{"primary group may not write", file(0o640, 0, 100), permWrite, false},
		{"supplementary group writes", file(0o660, 0, 27), permRead | permWrite, true},
		{"group class decides, not other", file(0o607, 0, 27), permRead, false},
		{"other reads", file(0o644, 0, 0), permRead, true},
		{"other may not", file(0o640, 0, 0), permRead, false},
		{"directory search", file(os.ModeDir|0o711, 0, 0), permExec, true},
		{"directory without search", file(os.ModeDir|0o744, 0, 0), permRead | permExec, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayAccess(who, tt.st, tt.want); got != tt.ok {
				t.Errorf("mayAccess(%v, %o) = %v, want %v", tt.st.Mode, tt.want, got, tt.ok)
			}
		})
	}
	root := Identity{}
	if !mayAccess(root, file(0, 1000, 1000), permRead|permWrite) {
		t.Error("root may not read and write a file of mode 0")
	}
	if mayAccess(root, file(0o644, 1000, 1000), permExec) {
		t.Error("root may run a file with no execute bit")
	}
}
