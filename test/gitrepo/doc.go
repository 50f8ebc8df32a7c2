// Package gitrepo owns the operator's remediation repository tests use: a bare "origin"
// and a working clone that commits and pushes to it, as a merged pull request would.
// It runs the real git; `remediator sync` reads what it pushes with go-git.
package gitrepo
