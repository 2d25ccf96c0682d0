package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/queue"
)

func newSubmit() *cobra.Command {
	var (
		cf    clientFlags
		req   apitype.JobRequest
		after []string
	)
	cmd := &cobra.Command{
		Use:   "submit --gpus N|--gpu-memory SIZE --time-limit DURATION --image IMAGE [flags] -- COMMAND [ARG...]",
		Short: "Queue a GPU job: it starts as soon as its GPUs are free",
		Long: `Queue a job on the agent's GPU queue and print its id. The job runs COMMAND
in a container of IMAGE, as you, on N whole GPUs; it starts at once when they
are free and otherwise waits, with a reason (` + "`gpumeter jobs`" + ` shows it), until
they are. At --time-limit it is stopped. --time-limit may be left out only
where the agent sets queue.default_time_limit.

--gpu-memory asks for memory on one GPU the agent shares (queue.shared_gpus)
instead of whole GPUs. The meter holds the job to it: a job that uses more is
warned and then stopped. --priority high is for admins and the users of
queue.priority.high_users.

--array makes an array job of tasks, one for each index given, and prints
the array's id (j-000123); its tasks are j-000123_0, j-000123_1, ... Each is a
job of its own, with the same request, and finds its index in
GPUMETER_ARRAY_INDEX and the array's task count in GPUMETER_ARRAY_COUNT.
--array takes a range (0-99), a list (1,3,5), a range with a step (0-99:4) or
a list of these, and %N to run at most N tasks at once (0-99%8); at most
10000 tasks.

--after makes the job wait for others to end: ok:ID (each succeeded), any:ID
(each ended, however), fail:ID (each ended other than succeeded); ids are
comma-separated and the flag repeatable, an array's id stands for every one of
its tasks, and you may name only your own jobs (admins anyone's). While it
waits its reason is dependency; once a job named can no longer meet the
condition it ends failed with dependency_never_satisfied, naming that job.
--requeue puts the job back in the queue when it exits non-zero (reason
failed_requeued), at most queue.max_requeue times.
--preemptible jobs queue behind the others and may use GPUs they wait for;
they are stopped (SIGTERM, then a kill after queue.preempt_grace, given to the
job in GPUMETER_PREEMPT_GRACE in seconds) and requeued when a job that is not
preemptible has waited queue.preempt_after for their GPUs. Checkpoint on
SIGTERM and resume from the checkpoint at start.

Sizes take B, KiB, MiB, GiB or TiB (32GiB); durations s, m, h and d (4h, 1d12h).`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("submit needs the job's command after --, as in gpumeter submit --gpus 1 --image IMAGE -- python train.py")
			case cmd.ArgsLenAtDash() != 0:
				return fmt.Errorf("give the job's command after --: %q came before it", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Command = args
			switch {
			case req.GPUMemory != "" && cmd.Flags().Changed("gpus"):
				return errors.New("--gpus and --gpu-memory together: ask for whole GPUs or for memory on one shared GPU, not both")
			case req.GPUMemory == "" && req.GPUs <= 0:
				return fmt.Errorf("--gpus: a job asks for at least 1 GPU, got %d; or give --gpu-memory SIZE on a shared GPU", req.GPUs)
			}
			if req.Image == "" {
				return errors.New("--image: a job needs an image, such as nvcr.io/nvidia/pytorch:24.05-py3")
			}
			if _, err := apitype.ParseJobRequest(req); err != nil {
				return flagError(err)
			}
			if req.Array != "" {
				if _, err := queue.ParseArray(req.Array); err != nil {
					return fmt.Errorf("--array: %w", err)
				}
			}
			deps, err := queue.ParseAfter(after)
			if err != nil {
				return fmt.Errorf("--after: %w", err)
			}
			for _, d := range deps {
				req.After = append(req.After, apitype.Dependency{Type: string(d.Type), ID: d.ID})
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			if req.Array != "" {
				a, err := c.SubmitArray(cmd.Context(), req)
				if err != nil {
					return c.explain(submitError(err))
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), client.Clean(a.ID))
				return err
			}
			job, err := c.Submit(cmd.Context(), req)
			if err != nil {
				return c.explain(submitError(err))
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), client.Clean(job.ID))
			return err
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&req.GPUs, "gpus", 0, "how many whole GPUs the job needs (this or --gpu-memory is required)")
	f.StringVar(&req.GPUMemory, "gpu-memory", "", "memory on one shared GPU instead of whole GPUs, such as 20GiB")
	f.StringVar(&req.Priority, "priority", "", "the job's class: low, normal or high (default normal; high for admins and queue.priority.high_users)")
	f.StringVar(&req.TimeLimit, "time-limit", "", "how long the job may run, such as 4h (required unless the agent sets queue.default_time_limit)")
	f.StringVar(&req.Image, "image", "", "the container image (required; the agent allows those in queue.images)")
	f.StringVar(&req.Name, "name", "", "a name for the job")
	f.StringArrayVar(&req.Env, "env", nil, "KEY=VALUE in the job's environment (repeatable; the values are never shown)")
	f.StringArrayVar(&req.Mounts, "mount", nil, "SRC:DST[:ro]: a host directory under queue.mount_roots (repeatable)")
	f.StringVar(&req.Workdir, "workdir", "", "the working directory in the container")
	f.Float64Var(&req.CPUs, "cpus", 0, "CPUs for the job (default queue.max_cpus)")
	f.StringVar(&req.Memory, "memory", "", "memory limit, such as 32GiB (default queue.max_memory)")
	f.StringVar(&req.ShmSize, "shm-size", "", "size of /dev/shm, such as 8GiB (Docker's default, 64MiB, is too small for PyTorch's DataLoader)")
	f.IntVar(&req.Pids, "pids", 0, "most processes and threads the job may have at once (default queue.max_pids)")
	f.StringArrayVar(&req.Publish, "publish", nil, "PORT[:CPORT]: publish container port CPORT on host port PORT, on queue.publish_address (repeatable)")
	f.StringArrayVar(&req.Labels, "label", nil, "KEY=VALUE label on the job's container, such as gpumeter.project=vision, with a key queue.labels allows (repeatable)")
	f.StringSliceVar(&req.Notify, "notify", nil, "job events the policy's webhook is sent for: start, end")
	f.StringVar(&req.AsUser, "as", "", "submit for USER (root on the agent's socket only)")
	f.StringVar(&req.Array, "array", "", "make an array job of one task per index: 0-99, 1,3,5, 0-99:4, with %N to run at most N at once (0-99%8)")
	f.StringArrayVar(&after, "after", nil, "TYPE:ID[,ID...]: start only after these jobs end: ok (succeeded), any (ended), fail (ended otherwise) (repeatable)")
	f.BoolVar(&req.Requeue, "requeue", false, "put the job back in the queue when it exits non-zero, at most queue.max_requeue times")
	f.StringVar(&req.Node, "node", "", "in a fleet, run on this node, or on one whose name matches this pattern (gpu-[1-3])")
	f.StringVar(&req.Model, "model", "", "in a fleet, run on GPUs whose model matches this pattern (*H100*)")
	f.BoolVar(&req.Preemptible, "preemptible", false, "let the job use GPUs others wait for: when one of them has waited queue.preempt_after, the job gets SIGTERM, queue.preempt_grace to checkpoint (GPUMETER_PREEMPT_GRACE, in seconds), a kill, and goes back to the queue keeping its place by age (whole GPUs only)")
	return cmd
}

// flagOf is the flag of a job request field.
var flagOf = map[string]string{
	"gpus": "--gpus", "gpu_memory": "--gpu-memory", "priority": "--priority", "time_limit": "--time-limit", "image": "--image", "name": "--name", "env": "--env",
	"mounts": "--mount", "workdir": "--workdir", "cpus": "--cpus", "memory": "--memory", "shm_size": "--shm-size", "pids": "--pids",
	"publish": "--publish", "labels": "--label", "notify": "--notify", "as_user": "--as", "array": "--array", "command": "the command",
	"after": "--after", "requeue": "--requeue",
	"preemptible": "--preemptible", "node": "--node", "model": "--model",
}

// flagError names the flag a request field error is about.
func flagError(err error) error {
	var fe *apitype.FieldError
	if errors.As(err, &fe) {
		if name, ok := flagOf[fe.Field]; ok {
			return fmt.Errorf("%s: %s", name, fe.Msg)
		}
	}
	return err
}

// submitError adds to a refusal the flag it is about.
func submitError(err error) error {
	var se *client.StatusError
	if !errors.As(err, &se) || se.Field == "" {
		return flagError(err)
	}
	name, ok := flagOf[se.Field]
	if !ok {
		return err
	}
	msg := strings.TrimPrefix(se.Message, se.Field+": ")
	if se.Reason != "" {
		return fmt.Errorf("%s: refused (%s): %s", name, se.Reason, msg)
	}
	return fmt.Errorf("%s: %s", name, msg)
}
