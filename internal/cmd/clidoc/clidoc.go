// Package clidoc writes the command-line reference (docs/cli-reference.md) from the
// cobra command tree itself, so that the documented flags are the flags the binary
// takes, with their defaults and help, and cannot fall behind them.
//
// It is a small walk of the tree rather than cobra's doc package: that one brings a
// man-page renderer (go-md2man) into the module for pages we do not ship, and stamps
// each page with the date it was generated, which would make the committed file
// differ from a fresh one every day.
package clidoc

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Header opens the generated file; it says how to refresh it.
const Header = `# Command reference

<!-- Generated from the remediator and remediator-controller command trees by ` + "`make cli-reference`" + `. Do not edit: change the commands' help and flags, then regenerate. -->

Every command of ` + "`remediator`" + ` (also ` + "`kubectl remediator`" + `) and of
` + "`remediator-controller`" + `, the controller's own binary, with its help and every flag and
default, as ` + "`--help`" + ` prints them. What the commands are for, the exit codes and shell
completion: [cli.md](cli.md).
`

// Write writes the reference of each root (one per binary) and every command under
// it to w: the header, then one section per available command, depth first, in
// cobra's order, root after root.
func Write(w io.Writer, roots ...*cobra.Command) error {
	var b bytes.Buffer
	b.WriteString(Header)
	var cmds []*cobra.Command
	for _, root := range roots {
		walk(root, &cmds)
	}
	b.WriteString("\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "- [%s](#%s): %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	for _, c := range cmds {
		writeCommand(&b, c)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// walk lists c and the commands under it that --help lists (not hidden, not help).
func walk(c *cobra.Command, out *[]*cobra.Command) {
	*out = append(*out, c)
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && sub.Name() != "help" {
			walk(sub, out)
		}
	}
}

func writeCommand(b *bytes.Buffer, c *cobra.Command) {
	fmt.Fprintf(b, "\n## %s\n\n%s\n", c.CommandPath(), c.Short)
	if c.Long != "" {
		fmt.Fprintf(b, "\n```text\n%s\n```\n", strings.TrimSpace(c.Long))
	}
	fmt.Fprintf(b, "\nUsage:\n\n```sh\n")
	if c.Runnable() {
		fmt.Fprintf(b, "%s\n", c.UseLine())
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(b, "%s [command]\n", c.CommandPath())
	}
	b.WriteString("```\n")
	if c.Example != "" {
		fmt.Fprintf(b, "\nExamples:\n\n```sh\n%s\n```\n", strings.TrimRight(c.Example, "\n"))
	}
	if subs := available(c); len(subs) > 0 {
		b.WriteString("\nCommands:\n\n")
		for _, s := range subs {
			fmt.Fprintf(b, "- [%s](#%s): %s\n", s.CommandPath(), anchor(s.CommandPath()), s.Short)
		}
	}
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(b, "\nFlags:\n\n```text\n%s```\n", fs.FlagUsagesWrapped(100))
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(b, "\nFlags of the parent commands:\n\n```text\n%s```\n", fs.FlagUsagesWrapped(100))
	}
}

func available(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() && s.Name() != "help" {
			out = append(out, s)
		}
	}
	return out
}

// anchor is the GitHub anchor of a "## remediator plan pull-request" heading.
func anchor(path string) string {
	return strings.ReplaceAll(strings.ToLower(path), " ", "-")
}
