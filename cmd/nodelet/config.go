package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/config"
)

const configUsage = `Usage:
  nodelet config defaults                 print the default configuration as YAML
  nodelet config validate [flags] FILE    check a NodeletConfiguration file

validate applies the agent's flags, if given, over FILE as the agent would
(for example --node-name for a file meant for many nodes), then prints every
error with its field path and exits non-zero, or says the file is valid.
`

// runConfig runs `nodelet config …`: commands that read configuration and
// never talk to a cluster.
func runConfig(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("config: want a command\n" + configUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "defaults":
		if len(rest) > 0 {
			return fmt.Errorf("config defaults takes no arguments, got %q", rest)
		}
		out, err := yaml.Marshal(config.Default())
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	case "validate":
		return validateConfig(rest, stdout)
	case "help", "-h", "--help":
		_, err := io.WriteString(stdout, configUsage)
		return err
	default:
		return fmt.Errorf("config: unknown command %q\n%s", cmd, configUsage)
	}
}

// validateConfig loads FILE under the flags in args exactly as the agent
// does and reports every problem.
func validateConfig(args []string, stdout io.Writer) error {
	var o options
	fs := newFlagSet(&o, config.Default())
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return fmt.Errorf("config validate: want one FILE, got %d\n%s", fs.NArg(), configUsage)
	case o.configFile != "":
		return errors.New("config validate: name the file as FILE, not with --config")
	}
	file := fs.Arg(0)
	o.configFile = file
	cfg, _, _, err := loadConfig(&o, args)
	var de *config.DecodeError
	if errors.As(err, &de) {
		return problems{fmt.Sprintf("%s: %v", de.Source, config.ErrDecode), de.Problems}
	}
	if err != nil {
		return err
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		p := problems{header: "config file " + file + " is invalid"}
		for _, e := range errs {
			p.list = append(p.list, e.Error())
		}
		return p
	}
	_, err = fmt.Fprintf(stdout, "config file %s is valid\n", file)
	return err
}

// problems is an error that lists its problems one a line.
type problems struct {
	header string
	list   []string
}

func (p problems) Error() string {
	return p.header + ":\n  " + strings.Join(p.list, "\n  ")
}
