// Package wiring is how the controller's manager reads: which objects it caches and
// how they are stripped, the sweeper that comes with the cache, and the gatherers
// and live reader built on it. `remediator-controller` and the envtests wire their
// managers through it, so that the tests read the way production does.
package wiring
