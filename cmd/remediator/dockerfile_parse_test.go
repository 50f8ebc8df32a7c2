package main

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	Line int    // where it starts
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string
}

// dockerStage is one FROM ... section.
type dockerStage struct {
	From         string // the image
	Name         string // AS name
	Instructions []dockerInstruction
}

func (s dockerStage) all(cmd string) []dockerInstruction {
	var out []dockerInstruction
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// parseDockerfile reads the subset of the Dockerfile syntax this repository uses:
// comments, blank lines, backslash continuations, one instruction per line.
func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var stages []dockerStage
	var cur strings.Builder
	start, n := 0, 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{Line: start, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		if in.Cmd == "FROM" {
			fields := strings.Fields(in.Args)
			st := dockerStage{From: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.Name = fields[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			require.Equal(t, "ARG", in.Cmd, "Dockerfile:%d: %s before the first FROM", in.Line, in.Cmd)
			return
		}
		stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	require.NoError(t, sc.Err())
	flush()
	return stages
}
