// Package cmdutil holds what the remediator commands share, as kubectl's
// pkg/cmd/util does: the cluster and connection flags, the logging flags, the -o
// printer flags, and the controller's settings from the chart's settings ConfigMap.
// One copy, so that the commands cannot drift apart in what they accept.
package cmdutil
