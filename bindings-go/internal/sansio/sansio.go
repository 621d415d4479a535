// Package sansio holds the switch of the Go binding's sans-I/O path, for
// the benchmark's A/B rounds (the path on and off in one run) and the tests.
package sansio

import "sync/atomic"

// Off sends every check the usual way (through the core's runtime) while set.
var Off atomic.Bool

// Carried counts the checks decided from a reply on a sans-I/O connection
// (every limiter's), for the benchmark to print the share it carried.
var Carried atomic.Uint64
