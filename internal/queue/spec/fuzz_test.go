package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
)

// FuzzCheck: the checker never panics, every error it returns for valid
// rules is a refusal with a known reason, a field and a text, and every
// request it accepts builds to an isolated spec.
//
//	go test ./internal/queue/spec -run '^$' -fuzz FuzzCheck -fuzztime 30s
func FuzzCheck(f *testing.F) {
	h := newHostTree(f)
	rules := testRules(h.root)
	rules.MinTimeLimit = time.Minute
	// Lists travel newline-separated.
	f.Add(2, int64(4*time.Hour), "nvcr.io/nvidia/pytorch:24.05-py3", "", "A=1", h.root+"/shared:/data:ro", "/data", 8.0, uint64(1<<30), uint64(1<<30), "8000:8888", "gpumeter.project=vision", "python\ntrain.py", uint32(4242))
	f.Add(1, int64(time.Hour), "docker.io/evil", "x", "NVIDIA_VISIBLE_DEVICES=all", "/:/host", "", 0.0, uint64(0), uint64(0), "", "gpumeter.exempt=true\ngpumeter.user=bob", "sh", uint32(0))
	f.Add(0, int64(0), "", "", "", "", "", -1.0, uint64(0), uint64(0), "", "", "", uint32(1))
	f.Add(9, int64(100*time.Hour), "localhost/job:root", "a b", "=\n1=2", h.root+"/escape:/x", "rel", 1e300, ^uint64(0), ^uint64(0), "99999", "=x\nk", "\x00", uint32(0))
	f.Add(3, int64(time.Minute), "localhost/job:1", "n", "CUDA_VISIBLE_DEVICES=0", h.root+"/shared/../../secret:/s", "/w", 0.5, uint64(7<<20), uint64(0), "8001\n8001", "gpumeter.sim.util=90\ngpumeter.sim.util=10", "a", uint32(4242))
	f.Add(1, int64(time.Minute), "localhost/job:1", "n", "A=B", h.root+"/private:/p:rw\n"+h.root+"/models:/m", "/", 16.0, uint64(64<<30), uint64(8<<30), "8099:1", "gpumeter.sim.memory=1GiB\ncom.docker.x=1\ngpumeter.job=j-9", "b", uint32(7))
	// Image references Docker refuses: a short digest, an uppercase
	// repository, a fullwidth tag, .., an empty tag; and ones it takes.
	for _, image := range []string{"localhost/job@sha256:abc", "localhost/Job:1", "localhost/job:\uff11", "localhost/job/../x:1",
		"localhost/job:", "localhost/job:1@sha256:" + strings.Repeat("0a", 32), "localhost/job@sha256:" + strings.Repeat("0a", 32),
		"localhost/job:UPPER", "localhost:5000/job:1", "nvcr.io/nvidia/pytorch:" + strings.Repeat("x", 128)} {
		f.Add(1, int64(time.Hour), image, "", "", "", "", 0.0, uint64(0), uint64(0), "", "", "sh", uint32(4242))
	}
	f.Fuzz(func(t *testing.T, gpus int, limit int64, image, name, env, mounts, workdir string, cpus float64, memory, shm uint64, publish, labels, command string, uid uint32) {
		req := Request{
			GPUs: gpus, TimeLimit: time.Duration(limit), Image: image, Name: name,
			Env: lines(env), Mounts: lines(mounts), Workdir: workdir,
			CPUs: cpus, Memory: memory, ShmSize: shm,
			Publish: lines(publish), Labels: lines(labels), Command: lines(command),
		}
		who := Identity{UID: uid, GID: uid, Groups: []uint32{uid, 2000}, User: "u", Team: "t"}
		err := Check(req, rules, who)
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Check: %v is not a refusal", err)
			}
			if !slices.Contains(Reasons, r.Reason) || r.Field == "" || r.Text == "" {
				t.Fatalf("refusal %+v lacks a known reason, a field or a text", r)
			}
			return
		}
		if _, err := reference.ParseNormalizedNamed(req.Image); err != nil {
			t.Fatalf("Check accepted image %q, which Docker's grammar refuses: %v", req.Image, err)
		}
		if req.TimeLimit < rules.MinTimeLimit {
			t.Fatalf("Check accepted a time limit of %v, under the minimum %v", req.TimeLimit, rules.MinTimeLimit)
		}
		gpuIDs := make([]string, req.GPUs)
		for i := range gpuIDs {
			gpuIDs[i] = "GPU-" + strings.Repeat("a", i+1)
		}
		for _, passing := range []GPUPassing{DeviceRequests, CDI, Env} {
			spec, err := Build(req, rules, who, "j-1", gpuIDs, passing)
			if err != nil {
				t.Fatalf("Build of a request Check accepted: %v", err)
			}
			assertIsolated(t, spec, rules)
		}
	})
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
