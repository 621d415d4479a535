//! Where state lives: the embedded memory store or Redis.

pub(crate) mod budget;
pub(crate) mod keys;
pub(crate) mod memory;
pub(crate) mod overrides;
pub(crate) mod redis;
