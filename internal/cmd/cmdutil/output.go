package cmdutil

// kubectl's printer flags, which plan and scan share.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// OutputFlags are kubectl's printer flags (cli-runtime's PrintFlags) around the
// command's own outputs: -o empty (the default, for people; table and text are older
// spellings of it), wide (the same with more detail), yaml and json (the command's
// document for tools), and what cli-runtime prints: name, jsonpath=...,
// jsonpath-as-json=..., jsonpath-file=..., go-template=..., go-template-file=...,
// template=... (missing keys allowed, as kubectl's default). jsonpath and go-template
// read what -o json prints. Only -o is a flag: the template goes in it, so that
// plan pull-request, which passes plan's other flags on, has nothing more to pass.
type OutputFlags struct {
	flags *genericclioptions.PrintFlags
	// human are the older spellings of the default output.
	human []string
}

// The outputs the commands render themselves, and name.
const (
	OutputWide = "wide"
	OutputYAML = "yaml"
	OutputJSON = "json"
	OutputName = "name"
)

// NewOutputFlags returns the printer flags with output set; human are the older
// spellings of the default output that the command accepts.
func NewOutputFlags(output string, human ...string) *OutputFlags {
	f := genericclioptions.NewPrintFlags("")
	// JSON and YAML are the commands' own (their objects carry no managed fields, so
	// there is no --show-managed-fields either).
	f.JSONYamlPrintFlags = nil
	f.OutputFormat = &output
	return &OutputFlags{flags: f, human: human}
}

// AddFlags registers -o on cmd.
func (o *OutputFlags) AddFlags(cmd *cobra.Command, usage string) {
	cmd.Flags().StringVarP(o.flags.OutputFormat, "output", "o", *o.flags.OutputFormat, usage)
}

// Format is the output asked for: "" for people, wide, yaml, json, or one of
// cli-runtime's.
func (o *OutputFlags) Format() string {
	if f := *o.flags.OutputFormat; !slices.Contains(o.human, f) {
		return f
	}
	return ""
}

// Validate refuses an output nothing prints (or a template that does not parse)
// before the command does any work.
func (o *OutputFlags) Validate() error {
	switch o.Format() {
	case "", OutputWide, OutputYAML, OutputJSON:
		return nil
	}
	_, err := o.Printer()
	return err
}

// Printer is cli-runtime's printer for -o name, jsonpath and go-template.
func (o *OutputFlags) Printer() (printers.ResourcePrinter, error) {
	p, err := o.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		allowed := append([]string{OutputWide, OutputYAML, OutputJSON}, o.flags.AllowedFormats()...)
		slices.Sort(allowed)
		return nil, fmt.Errorf("unknown --output %q: leave it out for the output for people, or use one of %s",
			*o.flags.OutputFormat, strings.Join(allowed, ", "))
	}
	return p, err
}

// ListOf is objects as the v1 List that -o json prints and cli-runtime's printers read.
func ListOf(objects []map[string]any) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, o := range objects {
		l.Items = append(l.Items, unstructured.Unstructured{Object: o})
	}
	return l
}
