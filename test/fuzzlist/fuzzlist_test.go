package fuzzlist

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)

// TestEveryFuzzTargetIsListed: the package:Target pairs of FUZZ_TARGETS are exactly
// the func FuzzXxx(*testing.F) of the repository's test files.
func TestEveryFuzzTargetIsListed(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// bin holds built tools and clusters; testdata and dot directories hold no
			// packages go test would fuzz.
			if p != root && (d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(data), -1) {
			found = append(found, "./"+filepath.ToSlash(rel)+":"+m[1])
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, found, "no fuzz targets found: is the walk rooted at the repository?")

	listed := makefileList(t, filepath.Join(root, "Makefile"), "FUZZ_TARGETS")
	require.ElementsMatch(t, found, listed,
		"FUZZ_TARGETS in the Makefile must list every func Fuzz as ./package:Target, and nothing else")
}

// makefileList returns the words of a Makefile variable set with :=, following
// backslash continuations.
func makefileList(t *testing.T, path, name string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" :="); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("%s sets no %s", path, name)
	return nil
}
