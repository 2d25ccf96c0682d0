package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/internal/config"
)

// sectionAnnotation is the flag annotation that names the help section a
// flag is listed under.
const sectionAnnotation = "gpumeter/section"

// keyValue is the flag of a setting: it keeps what was given, in order,
// for loadConfig to set, so that a flag's value is checked with the same
// words as the file's and the environment's.
type keyValue struct {
	key    config.Key
	values []string
}

func (v *keyValue) String() string { return strings.Join(v.values, ",") }

func (v *keyValue) Set(s string) error {
	if v.key.IsMap() {
		v.values = append(v.values, s)
	} else {
		v.values = []string{s}
	}
	return nil
}

// Type is the placeholder help shows; "bool" shows none, as for a plain
// boolean flag.
func (v *keyValue) Type() string { return v.key.Kind() }

// keyFlag registers the flag of a setting, with one default in its help,
// written as a config file writes it. A map setting repeats; a bare
// boolean flag (--ledger-enabled) means true.
func keyFlag(f *pflag.FlagSet, k config.Key) {
	usage := k.Help
	if k.IsMap() {
		usage += " (repeatable"
		if ex := k.Example(); ex != "" {
			usage += fmt.Sprintf(", e.g. %q", ex)
		}
		usage += ")"
	}
	if d := k.DefaultText(); d != "" && !(k.IsBool() && d == "false") {
		usage += " (default " + d + ")"
	}
	fl := f.VarPF(&keyValue{key: k}, k.Flag(), "", usage)
	// The help writes the default itself; pflag would add a second.
	fl.DefValue = ""
	if k.IsBool() {
		fl.NoOptDefVal = "true"
	}
	fl.Annotations = map[string][]string{sectionAnnotation: {k.Section()}}
}

// annotate puts a flag that is not a setting under a help section.
func annotate(f *pflag.FlagSet, name, section string) {
	f.Lookup(name).Annotations = map[string][]string{sectionAnnotation: {section}}
}

// keyValues is what the flag of k was given, nil when it was not set.
func keyValues(cmd *cobra.Command, k config.Key) []string {
	fl := cmd.Flags().Lookup(k.Flag())
	if fl == nil || !fl.Changed {
		return nil
	}
	if v, ok := fl.Value.(*keyValue); ok {
		return v.values
	}
	return []string{fl.Value.String()}
}

// groupedUsage writes a command's usage with its flags under the sections
// their annotations name, in the order of config.Sections; flags without
// one come first, under "Flags".
func groupedUsage(cmd *cobra.Command) error {
	w := cmd.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", cmd.UseLine())
	groups := map[string]*pflag.FlagSet{}
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		section := "Flags"
		if s := fl.Annotations[sectionAnnotation]; len(s) > 0 {
			section = s[0]
		}
		if groups[section] == nil {
			groups[section] = pflag.NewFlagSet(section, pflag.ContinueOnError)
			groups[section].SortFlags = cmd.Flags().SortFlags
		}
		groups[section].AddFlag(fl)
	})
	order := append([]string{"Flags"}, config.Sections...)
	for _, name := range order {
		if fs := groups[name]; fs != nil {
			writeSection(w, name, fs)
		}
	}
	return nil
}

func writeSection(w io.Writer, name string, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "\n%s:\n%s", name, fs.FlagUsages())
}

// suggestFlag adds the flag meant to an unknown flag error: the nearest
// setting's flag, when the command has it (serve's --intervall is
// --interval), else the command's own flag nearest in spelling. Every
// command inherits it from the root.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	if k, ok := config.Nearest(name); ok && cmd.Flags().Lookup(k.Flag()) != nil {
		return fmt.Errorf("%w; did you mean --%s?", err, k.Flag())
	}
	best, bestD := "", 3 // at most two edits away
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := config.Distance(name, f.Name); d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, best)
	}
	return fmt.Errorf("%w; see %s --help", err, cmd.CommandPath())
}
