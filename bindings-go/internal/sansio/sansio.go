// Package sansio holds the switch of the Go binding's sans-I/O path, for
// the benchmark's A/B rounds (the path on and off in one run) and the tests.
package sansio

import "sync/atomic"

// Off sends every check the usual way (through the core's runtime) while set.
var Off atomic.Bool
