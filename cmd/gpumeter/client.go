package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/listener"
)

// clientFlags are the flags of the commands that talk to an agent.
type clientFlags client.Flags

func (cf *clientFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&cf.URL, "url", "", "agent: http(s)://HOST:PORT or unix:///path/api.sock (default $GPUMETER_URL, else url: in the client config, else the local agent's socket if there is one, else a demo's this user runs, else "+client.DefaultURL+" for ps, stop and whoami, while report, waste and audit read the ledger)")
	f.StringVar(&cf.CAFile, "ca-file", "", "CA bundle (PEM) an https agent's certificate is checked against (default $GPUMETER_CA_FILE, else ca_file: in the client config)")
}

// hostEnv is the environment of this process, the socket the agent
// would listen on if started here (its config file and environment, as
// serve reads them), and the one a demo of this user's named in its
// record. A config this user may not read still leaves the defaults and
// the two settings that move the socket.
func hostEnv() client.Env {
	cfg, err := fileConfig("")
	if err != nil {
		cfg = config.Default()
		for k, env := range map[string]string{"data_dir": "GPUMETER_DATA_DIR", "api.socket": "GPUMETER_API_SOCKET"} {
			if v := os.Getenv(env); v != "" {
				_ = cfg.Set(k, v)
			}
		}
	}
	env := client.HostEnv(cfg.SocketPath())
	env.DemoSocket = listener.Advertised(listener.DemoRecord())
	return env
}

// agentClient is the API client and where its settings came from, so that
// a refusal can say which token was refused.
type agentClient struct {
	*client.Client
	settings client.Settings
	// node is the node the agent's last answer named.
	node string
}

// client builds the client for the agent the flags, the environment and
// the client config name. The agent's warnings go to cmd's stderr.
func (cf *clientFlags) client(cmd *cobra.Command) (*agentClient, error) {
	s, err := client.Resolve(client.Flags(*cf), hostEnv())
	if err != nil {
		return nil, err
	}
	return newAgentClient(cmd, s)
}

func newAgentClient(cmd *cobra.Command, s client.Settings) (*agentClient, error) {
	c, err := client.New(s.Options)
	if err != nil {
		return nil, err
	}
	ac := &agentClient{Client: c, settings: s}
	c.Answered = func(a client.Answer) {
		ac.node = a.Node
		for _, w := range a.Warnings {
			if s.TokenFrom != "" {
				w += "; the token came from " + s.TokenFrom
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "gpumeter: warning:", w)
		}
	}
	return ac, nil
}

// announce says on stderr which agent was read, for the commands that
// could read a ledger instead.
func (c *agentClient) announce(cmd *cobra.Command) {
	line := "reading the agent at " + c.settings.URL
	if c.node != "" {
		line += " (node " + c.node + ")"
	}
	fmt.Fprintln(cmd.ErrOrStderr(), line)
}

// explain adds to an error from the agent what the caller can do about
// it.
func (c *agentClient) explain(err error) error { return c.settings.Explain(err) }

// showBody is the RunE of a command that reads one body from the agent
// and prints it as a table, or as the API's JSON with --format json.
func showBody[T any](cf *clientFlags, format *string, get func(ctx context.Context, c *agentClient) (T, error), table func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if *format != "table" && *format != "json" {
			return fmt.Errorf("--format: %q is not table or json", *format)
		}
		c, err := cf.client(cmd)
		if err != nil {
			return err
		}
		body, err := get(cmd.Context(), c)
		if err != nil {
			return c.explain(err)
		}
		if *format == "json" {
			return writeJSONOut(cmd.OutOrStdout(), body)
		}
		return table(cmd.OutOrStdout(), body)
	}
}
