package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// flagGroup names a section of a command's help.
type flagGroup struct {
	title string
	names []string
}

// command is a subcommand's flag set with environment twins and grouped help.
type command struct {
	name    string
	summary string
	usage   string
	fs      *flag.FlagSet
	groups  []flagGroup
	// epilog follows the flags in --help: what else sets the command up.
	epilog string
	// set holds the flags given, on the command line or by their twin.
	set map[string]bool
	// typed are the flags given on the command line.
	typed map[string]bool
}

func newCommand(name, summary, usage string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &command{name: name, summary: summary, usage: usage, fs: fs}
}

// group starts a help section; flags defined after it belong to it.
func (c *command) group(title string) { c.groups = append(c.groups, flagGroup{title: title}) }

// Group is group, for runconfig.Define: a command is a runconfig.Table.
func (c *command) Group(title string) { c.group(title) }

func (c *command) add(name string) {
	g := &c.groups[len(c.groups)-1]
	g.names = append(g.names, name)
}

func (c *command) String(p *string, name, value, help string) {
	c.fs.StringVar(p, name, value, help)
	c.add(name)
}

func (c *command) Bool(p *bool, name string, value bool, help string) {
	c.fs.BoolVar(p, name, value, help)
	c.add(name)
}

func (c *command) Var(v flag.Value, name, help string) {
	c.fs.Var(v, name, help)
	c.add(name)
}

// envName is the environment twin of a flag: --upstream-ca is ADSTAP_UPSTREAM_CA.
func envName(flagName string) string {
	return "ADSTAP_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies environment twins, then the command line, which wins.
func (c *command) parse(args []string, getenv func(string) string) error {
	var err error
	c.fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("invalid value %q for %s: %v", v, envName(f.Name), e)
			}
			c.given(f.Name)
		}
	})
	if err != nil {
		return err
	}
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// The flag package spells flags with one dash; users type two.
		return errors.New(twoDashes.Replace(err.Error()))
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.fs.Arg(0))
	}
	c.fs.Visit(func(f *flag.Flag) {
		c.given(f.Name)
		if c.typed == nil {
			c.typed = map[string]bool{}
		}
		c.typed[f.Name] = true
	})
	return nil
}

func (c *command) given(name string) {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.set[name] = true
}

// isSet reports whether flag name was given, on the command line or by its
// environment twin.
func (c *command) isSet(name string) bool { return c.set[name] }

// onCommandLine reports whether flag name was given on the command line, not
// only by its environment twin (which other subcommands may share).
func (c *command) onCommandLine(name string) bool { return c.typed[name] }

// needs fails when a flag that only means something with another one is
// given without it: a setting that would silently do nothing.
func (c *command) needs(flagName, needed string, present bool) error {
	if c.isSet(flagName) && !present {
		return fmt.Errorf("--%s needs --%s", flagName, needed)
	}
	return nil
}

// parseArgs parses args, then the environment twins, for a command about to
// run. On --help it writes the help to stdout, on a bad flag the error to
// stderr; done then says the command ends there, with code.
func (c *command) parseArgs(args []string, stdout, stderr io.Writer) (code int, done bool) {
	err := c.parse(args, osEnv)
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, flag.ErrHelp):
		c.help(stdout)
		return exitOK, true
	default:
		fmt.Fprintf(stderr, "adstap %s: %v (see adstap %s --help)\n", c.name, err, c.name)
		return exitUsage, true
	}
}

// help writes the command's usage, its flags grouped, each with its env twin.
func (c *command) help(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s\n", c.summary, c.usage)
	for _, g := range c.groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			f := c.fs.Lookup(name)
			arg, text := flag.UnquoteUsage(f)
			head := "  --" + name
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool && arg != "" {
				head += "=" + arg
			}
			fmt.Fprintf(w, "%s\n      %s\n", head, text)
			extra := "env " + envName(name)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				extra += "; default " + f.DefValue
			}
			fmt.Fprintf(w, "      (%s)\n", extra)
		}
	}
	if c.epilog != "" {
		fmt.Fprintf(w, "\n%s", c.epilog)
	}
}

// twoDashes respells the flag package's messages with the dashes users type.
var twoDashes = strings.NewReplacer("defined: -", "defined: --", "for flag -", "for flag --", "argument: -", "argument: --")

// osEnv is os.Getenv, named for the tests that pass their own.
var osEnv = os.Getenv
