//go:build polylimit_release

package polylimit

// #cgo LDFLAGS: ${SRCDIR}/../target/release/libpolylimit_capi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
