package clidoc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWrite: every command --help lists has its section, with its flags and its
// parents' persistent flags, and a link that resolves to it; hidden commands and
// cobra's help command have none.
func TestWrite(t *testing.T) {
	run := func(*cobra.Command, []string) error { return nil }
	root := &cobra.Command{Use: "tool", Short: "The tool"}
	root.PersistentFlags().Bool("verbose", false, "Say more")
	sub := &cobra.Command{Use: "do THING", Short: "Do it", Long: "do does it.", RunE: run}
	sub.Flags().String("how", "well", "How to do it")
	deeper := &cobra.Command{Use: "again", Short: "Do it again", RunE: run}
	sub.AddCommand(deeper)
	root.AddCommand(sub, &cobra.Command{Use: "secret", Short: "Hidden", Hidden: true, RunE: run})
	root.InitDefaultHelpCmd()

	var b bytes.Buffer
	require.NoError(t, Write(&b, root))
	doc := b.String()
	for _, want := range []string{
		Header,
		"- [tool do](#tool-do): Do it\n",
		"- [tool do again](#tool-do-again): Do it again\n",
		"\n## tool do\n\nDo it\n\n```text\ndo does it.\n```\n",
		"```sh\ntool do THING [flags]\ntool do [command]\n```",
		`--how string   How to do it (default "well")`,
		"Flags of the parent commands:\n\n```text\n      --verbose   Say more\n",
		"\n## tool do again\n",
	} {
		assert.Contains(t, doc, want)
	}
	for _, deny := range []string{"## tool secret", "## tool help", "Hidden"} {
		assert.NotContains(t, doc, deny)
	}

	// A second binary's tree follows the first's, in the index and the sections.
	other := &cobra.Command{Use: "tool-daemon", Short: "Run the daemon", RunE: run}
	b.Reset()
	require.NoError(t, Write(&b, root, other))
	doc = b.String()
	assert.Contains(t, doc, "- [tool do again](#tool-do-again): Do it again\n- [tool-daemon](#tool-daemon): Run the daemon\n")
	assert.Contains(t, doc, "\n## tool-daemon\n\nRun the daemon\n")
	assert.Less(t, strings.Index(doc, "\n## tool do again\n"), strings.Index(doc, "\n## tool-daemon\n"))
	for _, deny := range []string{"## tool secret", "## tool help", "Hidden"} {
		assert.NotContains(t, doc, deny)
	}
}
