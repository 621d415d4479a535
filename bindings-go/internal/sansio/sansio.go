// Package sansio holds the switch of the Go binding's sans-I/O path, for
// the benchmark's A/B rounds (the path on and off in one run) and the tests.
package sansio

import "sync/atomic"

// Off sends every check and request the usual way (through the core's runtime) while set.
var Off atomic.Bool

// RequestsOff sends every request (CheckRequest, the middleware) the usual
// way while set; Check's lone-call path stays on.
var RequestsOff atomic.Bool

// Conns is the number of pipelined connections of each limiter built
// while it is set (0: the default, 1).
var Conns atomic.Int32

// Carried counts the checks and requests decided from a reply on a
// sans-I/O connection (every limiter's), for the benchmark to print the
// share it carried.
var Carried atomic.Uint64
