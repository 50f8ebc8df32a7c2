// Command bench is `make bench`: it measures bin/remediator-controller on the local kwok cluster
// (make cluster) in the four scenarios of docs/benchmarks.md - sequential latency next
// to the kubectl runbook, a storm of shut-down-holder requests over a cluster carrying
// many pods, a storm of disruptive (healthy-holder) requests under the cap, and memory
// against the number of pods - prints one summary table and writes results.json and
// the plots into -out. The storm runs at several sizes, each next to the API server's
// floor (the same releases with the minimum calls and no controller), and fails the
// run when the controller spends more API calls per request than callBudget. With
// -baseline (make bench BASELINE=<git ref>) the storm at the largest size runs once
// more with an earlier controller's binary, recorded side by side and never checked.
//
// It stages everything itself with client-go at high QPS, and labels what it made
// with the run's ID so that cleanup removes exactly that.
package main
