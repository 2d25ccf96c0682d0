package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/doctor"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	gpunvml "github.com/gpumeter/gpumeter/internal/nvml"
)

func newDoctor() *cobra.Command {
	var (
		configPath string
		format     string
		runImage   string
	)
	cmd := &cobra.Command{
		Use:   "doctor [--run-test IMAGE [-- COMMAND...]]",
		Short: "Check that this host is ready for GPU containers and for gpumeter, and say what to fix",
		Long: `Check the NVIDIA driver, NVML, the device nodes, the NVIDIA Container
Toolkit (and its known container escapes), Docker's nvidia runtime and CDI
specs, each GPU's modes and errors, and what gpumeter itself needs. Each
check says PASS, WARN, FAIL or SKIP with what it saw, and for WARN and FAIL
what to do. Host files are read under host.root (--host-root), so an agent
in a container with the host mounted checks the host. It never takes the
node's ledger lease. Exit status 0 when nothing failed, 1 otherwise.

--run-test IMAGE also runs IMAGE with --gpus all (nvidia-smi -L, or the
COMMAND after --), compares the GPUs it lists with NVML's, and removes the
container.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && runImage == "" {
				return fmt.Errorf("a command (%s) is for --run-test IMAGE", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format: %q is not one of table, json", format)
			}
			cfg, err := loadConfig(cmd, configPath)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			env := doctorEnv(&cfg)
			if runImage != "" {
				eng, ok := env.Docker.(doctor.Engine)
				if !ok {
					return errors.New("--run-test needs Docker (docker.enabled)")
				}
				env.RunTest = &doctor.RunTest{Runner: eng, Image: runImage, Cmd: args}
				var cancelRun context.CancelFunc
				ctx, cancelRun = context.WithTimeout(cmd.Context(), 5*time.Minute)
				defer cancelRun()
			}
			rs := doctor.Run(ctx, env)
			if format == "json" {
				err = doctor.WriteJSON(cmd.OutOrStdout(), rs)
			} else {
				err = doctor.WriteTable(cmd.OutOrStdout(), rs)
			}
			if err != nil {
				return err
			}
			if doctor.Summarize(rs).Fail > 0 {
				return exitError(1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configPath, "config", "c", "", "config file (default $GPUMETER_CONFIG, else "+defaultConfigPath+" if it exists)")
	f.StringVar(&format, "format", "table", "output: table or json")
	completeValues(cmd, "format", "table", "json")
	f.StringVar(&runImage, "run-test", "", "also run this image with --gpus all (nvidia-smi -L, or the command after --) and compare its GPUs with NVML's")
	for _, k := range config.Keys() {
		if strings.HasPrefix(k.Name, "host.") || k.Name == "docker.host" || k.Name == "docker.enabled" || k.Name == "nvml_library" || k.Name == "data_dir" || k.Name == "listen" || k.Name == "queue.gpu_passing" {
			keyFlag(f, k)
		}
	}
	completeKeyFlags(cmd)
	return cmd
}

// doctorEnv builds what the checks look at from cfg.
func doctorEnv(cfg *config.Config) doctor.Env {
	env := doctor.Env{
		Root:     os.DirFS(cfg.HostRoot),
		RootPath: cfg.HostRoot,
		Proc:     os.DirFS(cfg.ProcRoot),
		ProcPath: cfg.ProcRoot,
		Self: &doctor.Self{DataDir: cfg.DataDir, Listen: cfg.Listen,
			QueueEnabled: cfg.Queue.Enabled, GPUPassing: string(cfg.Queue.GPUPassing), Simulated: cfg.Source == "sim" || cfg.Source == "demo",
			Root: os.Geteuid() == 0},
	}
	if cfg.LedgerEnabled {
		env.Self.OpenLedger = func(ctx context.Context) error { return openLedgerReadOnly(ctx, cfg) }
	}
	if cfg.DockerEnabled {
		if cli, err := client.New(client.FromEnv, client.WithHost(cfg.DockerHost)); err == nil {
			env.Docker = doctor.Engine{Client: cli}
		}
	}
	lib := cfg.NVMLLibrary
	if lib == "" {
		lib = "libnvidia-ml.so.1"
	}
	if gpunvml.Probe(lib) == nil {
		env.NVML = nvml.New(nvml.WithLibraryPath(lib))
	}
	if cfg.HostRoot == "/" {
		env.ToolVersion = func(ctx context.Context, path string) (string, error) {
			out, err := exec.CommandContext(ctx, path, "--version").Output()
			return string(out), err
		}
	}
	return env
}

// openLedgerReadOnly checks the config's SQLite ledger read-only, without
// migrating it or taking a lease (those are the agent's); one not written
// yet is no error. A PostgreSQL ledger is checked the same way.
func openLedgerReadOnly(ctx context.Context, cfg *config.Config) error {
	if cfg.LedgerDSN != "" {
		_, err := postgres.Check(ctx, cfg.LedgerDSN)
		return err
	}
	path := cfg.LedgerPath()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := checkReadable(path); err != nil {
		return err
	}
	_, err := sqlite.Check(ctx, path)
	return err
}
