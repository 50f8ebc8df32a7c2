// Package docs_test checks the repository's Markdown: every relative link and anchor
// resolves, and the pages written for users read as documentation, not as a lab
// notebook.
package docs_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/test/harness/markdown"
)

// root is the repository's root, from test/harness/docs.
var root = filepath.Join("..", "..", "..")

// skipDirs are not the repository's own pages: build output, dependencies, and
// test data (which holds Markdown on purpose, links and all).
var skipDirs = map[string]bool{".git": true, "bin": true, "dist": true, "vendor": true, "node_modules": true, "testdata": true}

// markdownFiles are the repository's *.md files, slash-separated and relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	}))
	require.Contains(t, files, "README.md")
	require.Contains(t, files, "docs/oncall.md")
	return files
}

var (
	// An inline link or image, [text](target) or [text](target "title"); the text may
	// hold one level of brackets or an image.
	inlineLink = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(<?([^)\s>]*)>?(?:\s+"[^"]*")?\)`)
	// A reference definition, [label]: target.
	referenceLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?([^\s>]+)>?`)
	// A code span, whose text is not Markdown.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// A target with a scheme (https:, mailto:) is not the repository's.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links are the targets a Markdown text links to, outside code, with their lines.
func links(src string) map[int][]string {
	out := map[int][]string{}
	markdown.Lines(src, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out[n] = append(out[n], m[1])
		}
		if m := referenceLink.FindStringSubmatch(line); m != nil {
			out[n] = append(out[n], m[1])
		}
	})
	return out
}

// TestLinksResolve: every relative link of every page names a file or directory of
// the repository, and every anchor (#heading, page.md#heading) a heading of its
// page, as GitHub spells heading anchors (markdown.Anchor; a repeated heading gets
// -1, -2, ...). A link out of the repository is refused: the pages must not point at
// what is not shipped with them.
func TestLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		a, err := markdown.FileAnchors(filepath.Join(root, filepath.FromSlash(file)))
		require.NoError(t, err)
		anchors[file] = a
		return a
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		require.NoError(t, err)
		for n, targets := range links(string(src)) {
			for _, target := range targets {
				if target == "" || scheme.MatchString(target) {
					continue
				}
				checked++
				where := file + ":" + itoa(n) + ": " + target
				p, anchor, _ := strings.Cut(target, "#")
				dest := file
				if p != "" {
					if strings.HasPrefix(p, "/") {
						dest = path.Clean(strings.TrimPrefix(p, "/"))
					} else {
						dest = path.Join(path.Dir(file), p)
					}
					if dest == ".." || strings.HasPrefix(dest, "../") {
						t.Errorf("%s: points out of the repository", where)
						continue
					}
					info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
					if err != nil {
						t.Errorf("%s: %s does not exist", where, dest)
						continue
					}
					if info.IsDir() {
						if anchor != "" {
							t.Errorf("%s: an anchor on a directory", where)
						}
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsOf(dest)[anchor] {
					t.Errorf("%s: %s has no heading with the anchor #%s", where, dest, anchor)
				}
			}
		}
	}
	assert.Greater(t, checked, 100, "relative links checked")
}

// userDoc reports whether a page is written for the project's users: the README,
// the pages of docs/ (not the raw results below it), the chart's README and the
// examples' READMEs.
func userDoc(file string) bool {
	switch {
	case file == "README.md", file == "charts/remediator/README.md", file == "policies/README.md":
		return true
	case path.Dir(file) == "docs":
		return true
	case strings.HasPrefix(file, "examples/") && path.Base(file) == "README.md":
		return true
	}
	return false
}

// The rules a user doc keeps, in its prose (outside fenced code blocks; code spans
// count, since `abc1234` in a sentence is still a commit):
//   - no commit: a word of exactly 40, or of 7 to 12, lower-case hex digits with at
//     least one digit and one letter. A word is delimited by anything but letters,
//     digits, '_', '-', '.', ':' and '/', so the hex runs inside a PV name
//     (pvc-75a6fd7f-7aee-...), a UID, a digest (sha256:...) or a path are not words,
//     and a 64-digit SHA-256 is neither length;
//   - no reference to the project's issue tracker: "issue 26", "issue #26";
//   - no Go test function name, Test followed by an upper-case letter: say what is
//     tested, not which function tests it (fenced code counts here too);
//   - no calendar date, 2006-01-02: a page says what is true, not when it was.
var (
	hexWord   = regexp.MustCompile(`(?:^|[^0-9A-Za-z_\-.:/])([0-9a-f]{40}|[0-9a-f]{7,12})(?:$|[^0-9A-Za-z_\-:/])`)
	digit     = regexp.MustCompile(`[0-9]`)
	hexLetter = regexp.MustCompile(`[a-f]`)
	issueRef  = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]+`)
	testName  = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	date      = regexp.MustCompile(`\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b`)
)

// problems lists what a user doc's text breaks of the rules above, by line.
func problems(src string) []string {
	var out []string
	prose := map[int]bool{}
	markdown.Lines(src, func(n int, line string) {
		prose[n] = true
		for _, m := range hexWord.FindAllStringSubmatch(line, -1) {
			if digit.MatchString(m[1]) && hexLetter.MatchString(m[1]) {
				out = append(out, itoa(n)+": a commit hash: "+m[1])
			}
		}
		for _, m := range issueRef.FindAllString(line, -1) {
			out = append(out, itoa(n)+": an issue number: "+m)
		}
		for _, m := range date.FindAllString(line, -1) {
			out = append(out, itoa(n)+": a date: "+m)
		}
	})
	for i, line := range strings.Split(src, "\n") {
		for _, m := range testName.FindAllString(line, -1) {
			out = append(out, itoa(i+1)+": a test function's name: "+m)
		}
	}
	return out
}

// TestUserDocsReadAsDocumentation: the user docs hold no commit hashes, issue
// numbers, dates or test function names.
func TestUserDocsReadAsDocumentation(t *testing.T) {
	t.Run("the rules", func(t *testing.T) {
		for text, bad := range map[string]bool{
			"measured at 634fd40 on two cores":                           true,
			"`make chaos` at 1359b2f":                                    true,
			"before issue 25":                                            true,
			"see issue #26":                                              true,
			"TestLeaderFailover starts two processes":                    true,
			"took 13.3 minutes on 2026-12-02":                            true,
			"the Lease trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e": false,
			"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": false,
			"a decade, 10 minutes, 1000 inputs, deadbeef":                             false,
			"issues are tracked upstream; the e2e tests pass":                         false,
			"```\nmain is at 6ba780c\n```":                                            false,
		} {
			assert.Equal(t, bad, len(problems(text)) > 0, "%q: %v", text, problems(text))
		}
	})
	for _, file := range markdownFiles(t) {
		if !userDoc(file) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		require.NoError(t, err)
		for _, p := range problems(string(src)) {
			t.Errorf("%s:%s", file, p)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
