//go:build polylimit_release

package client

// #cgo LDFLAGS: ${SRCDIR}/../../target/release/libpolylimit_capi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
