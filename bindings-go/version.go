package polylimit

// #include "polylimit.h"
import "C"

// Version is the release of the polylimit core this package links: the Go
// module's version too, both stamped from the workspace Cargo.toml.
var Version = C.GoString(C.polylimit_version())
