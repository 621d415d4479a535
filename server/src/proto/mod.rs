//! Envoy's rate-limit service protos, as the `envoy-types` crate (0.7.7)
//! generates them from Envoy's published API definitions with prost-build
//! and tonic-build: its generated files for `envoy.service.ratelimit.v3`
//! whole, and from the others only the messages that service uses
//! (RateLimitDescriptor, HeaderValue, RateLimitUnit and the google.protobuf
//! well-known types), each copied unchanged, under the same module paths.
//! Why a copy of a few hundred lines and not the crate: the crate compiles
//! every one of Envoy's protos, by far the largest unit of a clean build of
//! this server (119 s of CPU, a fifth of the whole tree's, in debug).
//! Apache-2.0, as Envoy and envoy-types (github.com/flemosr/envoy-types).
#![allow(missing_docs, clippy::all, dead_code, rustdoc::invalid_html_tags, rustdoc::bare_urls)]

pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                include!("envoy.config.core.v3.rs");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    include!("envoy.extensions.common.ratelimit.v3.rs");
                }
            }
        }
    }
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                include!("envoy.service.ratelimit.v3.rs");
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            include!("envoy.type.v3.rs");
        }
    }
}
pub mod google {
    pub mod protobuf {
        include!("google.protobuf.rs");
    }
}
