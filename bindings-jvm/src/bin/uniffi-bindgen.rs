//! uniffi's bindings generator, built with the exact uniffi version the
//! library uses: `uniffi-bindgen generate --library <libpolylimit_jvm.so>
//! --language kotlin --out-dir <dir>`.

fn main() {
    uniffi::uniffi_bindgen_main()
}
