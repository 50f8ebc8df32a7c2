// Package promrules checks the monitoring the Helm chart ships with Prometheus' own
// code: the PrometheusRule's groups parse and validate with rulefmt (as promtool
// check rules does: every expression is valid PromQL, every template compiles),
// every alert is unit-tested as promtool test rules does (alerts_test.go: input
// series in the expanding notation, the rules evaluated by Prometheus' rule manager
// with their `for`, the firing alerts compared at an eval time; each alert has a
// case where it fires and one where it does not), and every query of the Grafana
// dashboard is valid PromQL over metrics the controller and the sync agent register.
//
// It is its own Go module so that Prometheus' dependencies (newer client_golang,
// common, Kubernetes libraries) do not move the main module's: it renders the chart
// from ../../charts/remediator with the Helm library and reads
// ../../controllers/*.go, ../../controllers/*/*.go and ../../internal/cmd/sync/metrics.go as text,
// importing nothing from the main module.
// `make test-unit` runs it.
package promrules
