package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/doctor"
	gpunvml "github.com/gpumeter/gpumeter/internal/nvml"
)

func newDoctor() *cobra.Command {
	var (
		configPath string
		format     string
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host is ready for GPU containers and for gpumeter, and say what to fix",
		Long: `Check the NVIDIA driver, NVML, the device nodes, the NVIDIA Container
Toolkit (and its known container escapes), Docker's nvidia runtime and CDI
specs, each GPU's modes and errors, and what gpumeter itself needs. Each
check says PASS, WARN, FAIL or SKIP with what it saw, and for WARN and FAIL
what to do. Host files are read under host.root (--host-root), so an agent
in a container with the host mounted checks the host. It never takes the
node's ledger lease. Exit status 0 when nothing failed, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	for _, k := range config.Keys() {
		if strings.HasPrefix(k.Name, "host.") || k.Name == "docker.host" || k.Name == "docker.enabled" || k.Name == "nvml_library" || k.Name == "data_dir" || k.Name == "listen" {
			keyFlag(f, k)
		}
	}
	return cmd
}

// doctorEnv builds what the checks look at from cfg.
func doctorEnv(cfg *config.Config) doctor.Env {
	env := doctor.Env{
		Root:     os.DirFS(cfg.HostRoot),
		RootPath: cfg.HostRoot,
		Self:     &doctor.Self{Proc: os.DirFS(cfg.ProcRoot), DataDir: cfg.DataDir, Listen: cfg.Listen},
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
