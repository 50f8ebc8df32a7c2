// Package helmchart owns rendering the charts/remediator Helm chart with the Helm
// library for tests: loading it from the repository, rendering it into objects the
// way `helm template --include-crds` would (but with strict templates, so that a
// reference to a value that does not exist fails), and linting it the way
// `helm lint --strict` does.
package helmchart
