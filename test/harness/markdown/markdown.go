// Package markdown reads what the repository's Markdown files link to: the anchors
// GitHub gives their headings and their relative links. The chart's tests use it for
// the alerts' runbook_url, the docs' tests for every link of every page.
package markdown

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

var (
	heading = regexp.MustCompile(`^(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	link    = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// What GitHub drops from a heading's text to make its anchor: anything but
	// letters, marks, numbers, connector punctuation (_), hyphens and spaces.
	anchorPunctuation = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc} -]`)
)

// Anchor is the anchor GitHub gives a heading: its text (a link's text for a link)
// in lower case, punctuation but '-' and '_' dropped, spaces turned into hyphens.
func Anchor(heading string) string {
	text := link.ReplaceAllString(heading, "$1")
	return strings.ReplaceAll(anchorPunctuation.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
}

// Lines calls fn with each line of src outside fenced code blocks and its
// 1-based number.
func Lines(src string, fn func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		fn(i+1, line)
	}
}

// Anchors are the anchors of a Markdown text's headings (outside fenced code), a
// repeated one numbered -1, -2, ... as GitHub does.
func Anchors(src string) map[string]bool {
	anchors, seen := map[string]bool{}, map[string]int{}
	Lines(src, func(_ int, line string) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		a := Anchor(m[2])
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	})
	return anchors
}

// FileAnchors are the anchors of a Markdown file's headings.
func FileAnchors(file string) (map[string]bool, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Anchors(string(src)), nil
}
