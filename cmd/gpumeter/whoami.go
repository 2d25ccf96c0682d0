package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
)

func newWhoami() *cobra.Command {
	var (
		cf     clientFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show who the agent takes you for: user, role and how you authenticated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format: %q is not text or json", format)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			me, err := c.Whoami(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(me)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 1, ' ', 0)
			fmt.Fprintf(tw, "user:\t%s\n", client.Clean(me.User))
			fmt.Fprintf(tw, "role:\t%s\n", client.Clean(me.Role))
			fmt.Fprintf(tw, "authenticated by:\t%s\n", client.Clean(authMethod(me)))
			fmt.Fprintf(tw, "agent:\t%s\n", c.settings.URL)
			return tw.Flush()
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	completeValues(cmd, "format", "text", "json")
	return cmd
}

// authMethod says how the caller authenticated, in words.
func authMethod(me apitype.Whoami) string {
	switch me.Method {
	case "token":
		return "token " + me.Name
	case "cert":
		return "client certificate " + me.Name
	case "socket":
		return "the agent's socket, as " + me.Name
	case "anonymous":
		return "nothing: anonymous access"
	}
	return me.Method + " " + me.Name
}
