// Command bench is `make bench`: it measures bin/remediator on the local kwok cluster
// (make cluster) in the four scenarios of docs/benchmarks.md - sequential latency next
// to the kubectl runbook, a storm of shut-down-holder requests over a cluster carrying
// many pods, a storm of disruptive (healthy-holder) requests under the cap, and memory
// against the number of pods - prints one summary table and writes results.json and
// the plots into -out.
//
// It stages everything itself with client-go at high QPS, and labels what it made
// with the run's ID so that cleanup removes exactly that.
package main
