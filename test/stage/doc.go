// Package stage owns the staging of incidents for the harnesses that drive the
// local cluster at scale (test/harness/bench, test/harness/chaos): the objects of
// an incident, created with client-go at high QPS, the way they would stand in a
// cluster after a rack lost power. Every object carries the run's label, so that
// cleanup removes exactly what this run made.
package stage
