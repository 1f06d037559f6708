//! The devices' identities as the last whole read of their maps found them, taken again while
//! every device the counts name was named by that read, or was not there either.
//!
//! An identity (`NAPI_IDENTITY` by NAPI instance, `DROP_DEVICES` by `net_device`) is written
//! on the first sight of its key, before the count that names it (`napi_poll`'s `first_sight`,
//! `drops`), and not rewritten while it is in the map. So the maps hold what the last read
//! found until a count names a key that read did not see, or the LRU evicts an identity (more
//! devices than `--map-capacity`), which moves no count: the maps are read whole when a key is
//! new and every [`WHOLE_EVERY`] samples whatever the counts say. A key the counts name that a
//! whole read did not find (its identity evicted while its counts stayed, or a NAPI entry made
//! again after an eviction without one) waits for the next of those, not read again each
//! sample. At 10,000 devices that drop packets, reading `DROP_DEVICES` whole was a fifth of the
//! agent's time in system calls at every collection (`strace -T`, the agent benchmark), for
//! identities that never changed. (A device shown that no identity names takes its name from
//! its pools: `model/interval.rs`.)
use std::collections::HashSet;

use ppscope_common::DeviceIdentity;

use super::kept::WHOLE_EVERY;
use crate::model::ByAddr;

/// What a sample's devices are named by: each NAPI instance's device, and each device's
/// identity (a NAPI instance's first, then a drop's).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Devices {
    pub napi_devices: ByAddr<u64, u64>,
    pub devices: ByAddr<u64, DeviceIdentity>,
}

impl Devices {
    /// Builds them from the two maps' entries, in the order they are read.
    pub fn of(
        napi: impl IntoIterator<Item = (u64, DeviceIdentity)>,
        drop_devices: impl IntoIterator<Item = (u64, DeviceIdentity)>,
    ) -> Self {
        let mut d = Self::default();
        for (key, id) in napi {
            d.napi_devices.insert(key, id.netdev);
            d.devices.insert(id.netdev, id);
        }
        for (key, id) in drop_devices {
            d.devices.entry(key).or_insert(id);
        }
        d
    }
}

#[derive(Debug, Default)]
pub(super) struct KeptDevices {
    last: Devices,
    /// Keys the counts named at the last whole read that it did not find: not new after it.
    unnamed_napi: HashSet<u64>,
    unnamed_devices: HashSet<u64>,
    /// Samples since the maps were last read whole; None before the first read.
    since_whole: Option<u32>,
}

impl KeptDevices {
    /// The identities as last read, if no count names a device they lack and the last whole
    /// read is recent; None when the maps must be read whole.
    ///
    /// `napi`: the NAPI instances counted; `dropped_on`: the devices drops were counted on
    /// (0, a device the drop's skb did not say, has no identity and asks for no read).
    pub fn unchanged(
        &mut self,
        mut napi: impl Iterator<Item = u64>,
        mut dropped_on: impl Iterator<Item = u64>,
    ) -> Option<Devices> {
        let since = self.since_whole?;
        let new_napi =
            |k: &u64| !self.last.napi_devices.contains_key(k) && !self.unnamed_napi.contains(k);
        let new_device = |d: &u64| {
            *d != 0 && !self.last.devices.contains_key(d) && !self.unnamed_devices.contains(d)
        };
        if since + 1 >= WHOLE_EVERY
            || napi.any(|k| new_napi(&k))
            || dropped_on.any(|d| new_device(&d))
        {
            return None;
        }
        self.since_whole = Some(since + 1);
        Some(self.last.clone())
    }

    /// Keeps a whole read, and the keys the counts named (as [`KeptDevices::unchanged`] is
    /// given them) that it did not find.
    pub fn replace(
        &mut self,
        read: &Devices,
        napi: impl Iterator<Item = u64>,
        dropped_on: impl Iterator<Item = u64>,
    ) {
        self.last.clone_from(read);
        self.unnamed_napi = napi
            .filter(|k| !read.napi_devices.contains_key(k))
            .collect();
        self.unnamed_devices = dropped_on
            .filter(|d| *d != 0 && !read.devices.contains_key(d))
            .collect();
        self.since_whole = Some(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(netdev: u64, ifindex: u32) -> DeviceIdentity {
        DeviceIdentity {
            ifindex,
            napi_id: 0,
            netdev,
            ifname: [0; 16],
        }
    }

    #[test]
    fn a_napi_instances_device_names_the_device_before_a_drops_identity_does() {
        let d = Devices::of([(7, id(100, 3))], [(100, id(100, 9)), (200, id(200, 4))]);
        assert_eq!(d.napi_devices.get(&7), Some(&100));
        assert_eq!(d.devices[&100].ifindex, 3);
        assert_eq!(d.devices[&200].ifindex, 4);
    }

    #[test]
    fn identities_are_read_whole_first_for_a_new_key_and_every_minute_of_samples() {
        let mut k = KeptDevices::default();
        let none = || std::iter::empty::<u64>();
        assert!(k.unchanged(none(), none()).is_none(), "never read");
        let read = Devices::of([(7, id(100, 3))], [(200, id(200, 4))]);
        k.replace(&read, none(), none());
        assert_eq!(
            k.unchanged([7].into_iter(), [100, 200, 0].into_iter()),
            Some(read.clone())
        );
        // A NAPI instance or a dropping device the last read did not name: read whole.
        assert!(k.unchanged([8].into_iter(), none()).is_none());
        assert!(k.unchanged(none(), [300].into_iter()).is_none());
        // Unnamed (0) drops ask for nothing: their device is not known to the skb.
        assert!(k.unchanged(none(), [0].into_iter()).is_some());
        k.replace(&read, none(), none());
        for _ in 1..WHOLE_EVERY {
            assert!(k.unchanged(none(), none()).is_some());
        }
        assert!(
            k.unchanged(none(), none()).is_none(),
            "an evicted identity shows as gone within {WHOLE_EVERY} samples"
        );
    }

    #[test]
    fn a_key_the_whole_read_did_not_find_waits_for_the_next_whole_read() {
        let mut k = KeptDevices::default();
        let read = Devices::of([(7, id(100, 3))], []);
        // Instance 8 and device 300 are counted but have no identity in the maps (evicted).
        k.replace(&read, [7, 8].into_iter(), [300].into_iter());
        assert!(
            k.unchanged([7, 8].into_iter(), [300].into_iter()).is_some(),
            "not read whole again at every sample"
        );
        assert!(
            k.unchanged([9].into_iter(), [].into_iter()).is_none(),
            "9 is new"
        );
    }
}
