//! Concurrency: requests in flight. Every admitted request holds a lease of
//! `cost` slots until it is released or its lease ends (`expires`), so a
//! crashed process gives its slots back. Allowed iff the slots of the live
//! leases (`expires > now`) plus cost <= limit. Mirrored by
//! `core/lua/concurrency.lua`, where a lease of n slots is n members of a
//! sorted set scored by its expiry.
//!
//! `Params`: `count` and `burst` are the limit, `period` the lease in ms.

use super::{never_fits, verdict, Params, Update, Verdict};

/// One lease: when it ends, how many slots it holds, its id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    expires: i64,
    slots: i64,
    id: Box<str>,
}

/// A key's leases, sorted by expiry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Leases {
    leases: Vec<Lease>,
}

impl Leases {
    /// Drops the leases that ended at or before `now`.
    pub fn trim(&mut self, now: i64) {
        let ended = self.leases.partition_point(|l| l.expires <= now);
        self.leases.drain(..ended);
    }

    /// Adds a lease, keeping them sorted by expiry (even if the clock went back).
    pub fn push(&mut self, id: Box<str>, expires: i64, slots: i64) {
        let index = self.leases.partition_point(|l| l.expires <= expires);
        self.leases.insert(index, Lease { expires, slots, id });
    }

    /// Removes the lease `id`. True if it was live at `now`: releasing an
    /// unknown, released or ended lease changes nothing that counts.
    pub fn release(&mut self, id: &str, now: i64) -> bool {
        match self.leases.iter().position(|l| &*l.id == id) {
            Some(index) => self.leases.remove(index).expires > now,
            None => false,
        }
    }

    fn live(&self, now: i64) -> impl Iterator<Item = &Lease> {
        let first = self.leases.partition_point(|l| l.expires <= now);
        self.leases[first..].iter()
    }
}

/// Decides one acquire of `cost` slots at `now`.
pub(crate) fn decide(p: &Params, leases: Option<&Leases>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let limit = p.burst;
    let (mut in_flight, mut latest) = (0, None);
    for lease in leases.into_iter().flat_map(|l| l.live(now)) {
        in_flight += lease.slots;
        latest = Some(lease.expires);
    }
    let reset = latest.map_or(0, |t| t - now);
    if cost > limit {
        return never_fits(limit - in_flight, reset);
    }
    if in_flight + cost <= limit {
        let expires = now + p.period;
        let update = Update::Acquire {
            id: Box::default(),
            at: now,
            expires,
            slots: cost,
        };
        let reset = latest.map_or(expires, |t| t.max(expires)) - now;
        return (verdict(true, limit - in_flight - cost, reset, None), Some(update));
    }
    // The leases ending first make room first: the one whose end frees
    // `need` slots (with all ending before it). A release comes sooner.
    let need = in_flight + cost - limit;
    let mut freed = 0;
    let mut retry = None;
    for lease in leases.into_iter().flat_map(|l| l.live(now)) {
        freed += lease.slots;
        if freed >= need {
            retry = Some(lease.expires - now);
            break;
        }
    }
    (verdict(false, limit - in_flight, reset, retry), None)
}
