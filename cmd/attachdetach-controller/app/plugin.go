package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// PluginName is the binary's name as a kubectl plugin, which kubectl runs for
// `kubectl attachdetach ...`.
const PluginName = "kubectl-attachdetach"

// UsageError is a command line explain cannot run: a wrong flag, value or
// argument. The command exits with 2 for it, 1 for any other error.
type UsageError struct{ err error }

func (e UsageError) Error() string { return e.err.Error() }
func (e UsageError) Unwrap() error { return e.err }

// NewPluginCommand is the command line of `kubectl attachdetach`, or of
// `attachdetach-controller explain`: displayName is the command as the user
// typed it, for help and errors.
func NewPluginCommand(displayName string, stdout, stderr io.Writer) *cobra.Command {
	return newPluginCommand(displayName, stdout, stderr, func(ctx context.Context, o *ExplainOptions) error {
		return RunExplain(ctx, o, stdout, stderr)
	})
}

// newPluginCommand is NewPluginCommand with explain's run given: a test reads
// the options the command line gave.
func newPluginCommand(displayName string, stdout, stderr io.Writer, run func(context.Context, *ExplainOptions) error) *cobra.Command {
	config := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:   "attachdetach",
		Short: "Tell why volumes are, or are not, attached",
		Long: `Tell why the volumes of a pod, claim, volume, node or VolumeAttachment are, or are not,
attached, by the rules of the attachdetach-controller.`,
		Example: `  # Why the volume of a pod waits
  ` + displayName + ` explain pod/web-0 -n shop

  # The same, asked of the running leader, which also knows its backoffs and waits
  ` + displayName + ` explain pod/web-0 -n shop --from-leader

  # Every volume attached to a node, as JSON, in another cluster
  ` + displayName + ` explain node/worker-3 -o json --context prod`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: displayName},
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		// Runnable, so that an unknown command is an error rather than help.
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
		// `kubectl completion` completes plugins through kubectl_complete-attachdetach.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	config.AddFlags(root.PersistentFlags())
	registerConfigCompletion(root, config)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return UsageError{fmt.Errorf("%w\nSee '%s --help' for usage.", err, c.CommandPath())}
	})
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c, nil) })
	root.AddCommand(newExplainCommand(displayName, config, run), newOptionsCommand(), newVersionCommand())
	return root
}

// newExplainCommand is `explain KIND/NAME`.
func newExplainCommand(displayName string, config *genericclioptions.ConfigFlags, run func(context.Context, *ExplainOptions) error) *cobra.Command {
	o := &ExplainOptions{Config: config, Policy: controller.DefaultOptions()}
	cmd := &cobra.Command{
		Use:                   "explain (pod|pvc|pv|node|volumeattachment)/NAME",
		DisableFlagsInUseLine: true,
		Short:                 "Tell why the volumes of an object are, or are not, attached",
		Long: `Tell, for each volume of the object, which nodes need it and for which pods, its
VolumeAttachments, node status, and what the controller's rules say must happen now
and why. It reads the cluster with your credentials and writes nothing.

Read from the cluster, it applies the detach policy its flags give: pass the
deployment's --max-wait-for-unmount, --max-wait-for-unmount-per-driver,
--disable-force-detach-on-timeout and --detach-on-shutdown-taint. The leader
(--from-leader) answers with its own settings, and also knows the operations in
progress, their backoffs and when each wait for unmount began.`,
		Example: `  # Why the volume of a pod waits, in the context's namespace
  ` + displayName + ` explain pod/web-0

  # What the leader knows of a claim's volume
  ` + displayName + ` explain pvc/data-web-0 -n shop --from-leader

  # A volume as a snapshot sees it under the deployment's detach policy
  ` + displayName + ` explain pv/pvc-0f6c2d9e --max-wait-for-unmount=10m`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return UsageError{fmt.Errorf("explain takes exactly one KIND/NAME, got %d arguments\nSee '%s --help' for usage.", len(args), c.CommandPath())}
			}
			return nil
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeTarget(c.Context(), config, toComplete)
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, err := explain.ParseTarget(args[0], "")
			if err != nil {
				return UsageError{err}
			}
			o.Target = target
			if err := o.Validate(); err != nil {
				return UsageError{err}
			}
			return run(c.Context(), o)
		},
	}
	groups := explainFlagGroups(o)
	for _, g := range groups {
		cmd.Flags().AddFlagSet(g.flags)
	}
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c, groups) })
	registerOutputCompletion(cmd)
	return cmd
}

// explainFlagGroups are explain's own flags, in the groups its help lists.
func explainFlagGroups(o *ExplainOptions) []flagGroup {
	output := pflag.NewFlagSet("output", pflag.ContinueOnError)
	output.StringVarP(&o.Output, "output", "o", "text", "Output format: text, json or yaml.")
	output.DurationVar(&o.Timeout, "timeout", time.Minute, "How long to wait for the cluster's state.")

	leader := pflag.NewFlagSet("leader", pflag.ContinueOnError)
	leader.BoolVar(&o.FromLeader, "from-leader", false,
		"Ask the running leader, which also knows the operations in progress, backoffs and when each wait for unmount began; falls back to reading the cluster when it cannot be reached.")
	leader.StringVar(&o.LeaderURL, "leader-url", "",
		"Base URL of the leader's --http-endpoint: https://HOST:PORT, asked with the kubeconfig's credentials, or http://HOST:PORT of a leader run with --http-endpoint-insecure, asked without "+
			"(default: https through a port-forward of the API server to the pod the Lease names).")
	leader.IntVar(&o.LeaderPort, "leader-port", 8080, "Port of the leader pod's --http-endpoint, for the port-forward.")
	leader.StringVar(&o.LeaseNamespace, "leader-elect-resource-namespace", "attachdetach-controller", "Namespace of the leader Lease, and of the leader's pod.")
	leader.StringVar(&o.LeaseName, "leader-elect-resource-name", "attachdetach-controller", "Name of the leader Lease.")

	// The detach policy flags are the controller's own, registered once.
	goFlags := flag.NewFlagSet("policy", flag.ContinueOnError)
	addDetachPolicyFlags(goFlags, &o.Policy)
	policy := pflag.NewFlagSet("policy", pflag.ContinueOnError)
	policy.AddGoFlagSet(goFlags)

	return []flagGroup{
		{"Options", output},
		{"Leader options", leader},
		{"Detach policy options (the deployment's, for a snapshot)", policy},
	}
}

// newOptionsCommand prints kubectl's flags, which every command takes, as
// `kubectl options` does.
func newOptionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "options",
		Short: "Print the list of flags inherited by all commands",
		Args:  noArgs,
		Run: func(c *cobra.Command, _ []string) {
			out := c.OutOrStdout()
			fmt.Fprint(out, "The following options can be passed to any command:\n\n")
			writeFlags(out, c.Root().PersistentFlags())
		},
	}
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		Run: func(c *cobra.Command, _ []string) {
			fmt.Fprintln(c.OutOrStdout(), version.String())
		},
	}
}

// noArgs refuses arguments, as a usage error: for the root command, an unknown
// command.
func noArgs(c *cobra.Command, args []string) error {
	if err := cobra.NoArgs(c, args); err != nil {
		return UsageError{fmt.Errorf("%w\nSee '%s --help' for usage.", err, c.CommandPath())}
	}
	return nil
}

// ExitCode is the exit status for the error a command returned: 0 for none, 2 for
// a command line it cannot run, 1 otherwise.
func ExitCode(err error) int {
	var usage UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		return 2
	}
	return 1
}
