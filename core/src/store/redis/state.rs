//! The store's state: its connection, whether decisions are functions, the
//! estimate of the server's clock, and the cross-slot test hook.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;

use super::clock::ServerClock;
use super::connection::{Connector, Timeouts};
use crate::error::Result;

/// A test hook run between the peek and the charge pass of a cross-slot
/// decision, to make a group deny in the charge pass deterministically.
pub(crate) type BetweenPasses = Arc<dyn Fn() + Send + Sync>;

/// A Redis deployment reached through one shared connection.
pub(crate) struct RedisStore {
    pub(super) link: Connector,
    pub(super) between_passes: Mutex<Option<BetweenPasses>>,
    /// Whether decisions go through the function library: until the server
    /// shows it has no functions (Redis < 7) or may not use them (ACL).
    pub(super) functions: AtomicBool,
    /// The estimate of the server's clock that function calls send.
    pub(super) clock: ServerClock,
}

impl RedisStore {
    /// Parses the store URL; connects lazily, on the first decision. With
    /// `tls_ca` (PEM), TLS connections trust that CA instead of the public web CAs.
    pub fn open(url: &str, timeouts: Timeouts, tls_ca: Option<Vec<u8>>) -> Result<RedisStore> {
        let link = Connector::open(url, timeouts, tls_ca)?;
        Ok(RedisStore {
            between_passes: Mutex::new(None),
            // Cluster decisions stay scripts: a library would have to be
            // loaded on every primary, and re-loaded on each after failover.
            functions: AtomicBool::new(!link.is_cluster()),
            link,
            clock: ServerClock::new(),
        })
    }
}
