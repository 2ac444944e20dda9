package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroup is a titled group of a command's flags in its help.
type flagGroup struct {
	title string
	flags *pflag.FlagSet
}

// helpWidth is where help wraps the descriptions of flags.
const helpWidth = 80

// writeHelp prints a command's help in kubectl's layout: the description,
// Examples, the commands, the flags by group, Usage, and where to read more.
// kubectl's own flags, which every command takes, are left to `options`, as
// kubectl leaves them to `kubectl options`.
func writeHelp(w io.Writer, c *cobra.Command, groups []flagGroup) {
	fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(c.Long))
	if c.Example != "" {
		fmt.Fprintf(w, "Examples:\n%s\n\n", c.Example)
	}
	if subcommands := visibleCommands(c); len(subcommands) > 0 {
		fmt.Fprintln(w, "Available Commands:")
		for _, sub := range subcommands {
			fmt.Fprintf(w, "  %-12s %s\n", sub.Name(), sub.Short)
		}
		fmt.Fprintln(w)
	}
	for _, g := range groups {
		fmt.Fprintf(w, "%s:\n", g.title)
		writeFlags(w, g.flags)
	}
	fmt.Fprintln(w, "Usage:")
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "  %s [command] [options]\n\n", c.CommandPath())
		fmt.Fprintf(w, "Use \"%s <command> --help\" for more information about a given command.\n", c.CommandPath())
	} else {
		fmt.Fprintf(w, "  %s [options]\n\n", c.UseLine())
	}
	fmt.Fprintf(w, "Use \"%s options\" for a list of global command-line options (applies to all commands).\n", c.Root().CommandPath())
}

func visibleCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			out = append(out, sub)
		}
	}
	return out
}

// writeFlags prints flags as kubectl's help does: the flag with its default on
// one line, the description below it, indented by a tab.
func writeFlags(w io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "    --" + f.Name
		if f.Shorthand != "" {
			name = "    -" + f.Shorthand + ", --" + f.Name
		}
		fmt.Fprintf(w, "%s=%s:\n", name, flagDefault(f))
		for _, line := range wrap(f.Usage, helpWidth-8) {
			fmt.Fprintf(w, "\t%s\n", line)
		}
		fmt.Fprintln(w)
	})
}

// flagDefault is the default as kubectl's help shows it: quoted for strings.
func flagDefault(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "string":
		return "'" + f.DefValue + "'"
	case "stringSlice", "stringArray":
		return "[" + strings.Trim(f.DefValue, "[]") + "]"
	}
	if f.DefValue == "" {
		return "''"
	}
	return f.DefValue
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
