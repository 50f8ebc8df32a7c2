// Package fuzzlist owns the check that make fuzz runs every fuzz target in the repository.
// go test fuzzes one target per invocation, so the Makefile lists them (FUZZ_TARGETS)
// and a target added without being listed would never be fuzzed, silently.
package fuzzlist
