package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/agent"
	"github.com/gpumeter/gpumeter/internal/config"
)

const defaultConfigPath = config.DefaultFile

func newServe() *cobra.Command {
	var (
		configPath string
		simFile    string
		demo       bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the agent: sample GPUs, attribute use to containers and users, serve /metrics and the API",
		Long: `Run the agent: sample GPUs, attribute use to containers and users, serve
/metrics, the JSON API and a live page on --listen (default :9400).

With no source flag it reads the GPUs through NVML. On a machine without a GPU
use --demo for the built-in demo, or --sim FILE to play a scenario.

Settings come from the config file, then GPUMETER_* environment variables,
then flags, each overriding the one before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, configPath)
			if err != nil {
				return err
			}
			switch {
			case demo && simFile != "":
				return errors.New("--demo and --sim exclude each other")
			case demo:
				cfg.Source = "demo"
			case simFile != "":
				cfg.Source, cfg.SimFile = "sim", simFile
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid config:\n%w", err)
			}
			logger := newLogger(cfg.LogLevel)
			a, err := agent.New(cmd.Context(), cfg, logger, versionString())
			if err != nil {
				return err
			}
			addr, err := a.Listen()
			if err != nil {
				a.Close()
				return err
			}
			printServing(cmd.ErrOrStderr(), a, addr)
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			a.ReloadOn(hup, func() (config.Config, error) { return reload(cmd, configPath, demo, simFile) })
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configPath, "config", "c", "", "config file (default $GPUMETER_CONFIG, else "+defaultConfigPath+" if it exists)")
	f.StringVar(&simFile, "sim", "", "play this scenario file instead of reading GPUs")
	f.BoolVar(&demo, "demo", false, "play the built-in demo scenario instead of reading GPUs")
	for _, k := range config.Keys() {
		// --sim FILE sets sim_file and the source at once.
		if k.Name != "sim_file" {
			keyFlag(f, k)
		}
	}
	cmd.InitDefaultHelpFlag()
	annotate(f, "help", "General")
	annotate(f, "config", "General")
	annotate(f, "sim", "GPU source")
	annotate(f, "demo", "GPU source")
	cmd.SetUsageFunc(groupedUsage)
	completeKeyFlags(cmd)
	return cmd
}

// reload reads the settings again, as serve did at the start, for the
// agent to put in force on a SIGHUP; it keeps its old ones when they do
// not validate.
func reload(cmd *cobra.Command, configPath string, demo bool, simFile string) (config.Config, error) {
	cfg, err := loadConfig(cmd, configPath)
	if err == nil {
		switch {
		case demo:
			cfg.Source = "demo"
		case simFile != "":
			cfg.Source, cfg.SimFile = "sim", simFile
		}
	}
	return cfg, err
}

// printServing says where the agent answers, and how to get in.
func printServing(w io.Writer, a *agent.Agent, addr net.Addr) {
	base := a.Scheme() + "://" + addr.String()
	fmt.Fprintf(w, "gpumeter: serving on %s (metrics at /metrics)\n", base)
	if sock := a.Socket(); sock != "" {
		fmt.Fprintf(w, "gpumeter: local CLI socket %s (root and this user need no token)\n", sock)
	}
	if tok := a.DemoToken(); tok != "" {
		host := addr.String()
		if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			host = net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
		}
		fmt.Fprintf(w, "gpumeter: demo admin token, valid while this demo runs: %s\n", tok)
		fmt.Fprintf(w, "gpumeter: open %s://%s/#token=%s\n", a.Scheme(), host, tok)
	}
}

// loadConfig builds the settings: defaults, the file, the environment,
// then the flags the user set.
func loadConfig(cmd *cobra.Command, path string) (config.Config, error) {
	return config.Load(config.Sources{File: path, Environ: os.Environ(), Flags: func(k config.Key) []string { return keyValues(cmd, k) }})
}

// fileConfig is the config at path (else $GPUMETER_CONFIG, else
// defaultConfigPath if it exists) with the environment over it.
func fileConfig(path string) (config.Config, error) {
	return config.Load(config.Sources{File: path, Environ: os.Environ()})
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
