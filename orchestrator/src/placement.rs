//! Placement: which memory an allocation's pages should live in when the data may not fit the
//! GPU, chosen per allocation (docs/placement.md).
//!
//! Every segment of the arena belongs to one [`Tier`]: the runtime advises the driver where a
//! segment's pages live (device memory, or host memory mapped for the GPU) when it reserves it,
//! so the tier is a property of whole segments and so of whole 2 MiB VA blocks, the unit the
//! driver migrates and evicts. An allocation is put in a tier by its largest lane object
//! ([`PlacementRule::tier_for`]): objects of at least `hot_object_bytes` ask the device tier
//! first, smaller ones the host tier first.
//!
//! Invariants: a segment's tier never changes; the tier only orders the asking, so an allocation
//! asks every segment before it fails and a placement never causes an out-of-memory (a hot object
//! whose tier is full lands in the other one, and so does a cold one); an arena whose segments
//! are all [`Tier::Any`] asks them in reservation order, as without placement.

/// Which memory a segment's pages are advised to live in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// No advice: pages migrate to whichever processor touches them.
    #[default]
    Any,
    /// Preferred on the GPU (and mapped for it): the hot objects.
    Device,
    /// Preferred in host memory and mapped for the GPU, which reads it over the link instead of
    /// migrating it: the cold objects.
    Host,
}

/// Which tier an allocation asks first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementRule {
    /// Allocations whose largest object has at least this many bytes ask the device tier first;
    /// smaller ones the host tier (0: every allocation asks the device tier first, so it fills in
    /// allocation order).
    pub hot_object_bytes: u64,
}

impl PlacementRule {
    /// The tier an allocation whose largest object has `largest_object` bytes asks first.
    pub fn tier_for(&self, largest_object: u64) -> Tier {
        if largest_object >= self.hot_object_bytes {
            Tier::Device
        } else {
            Tier::Host
        }
    }

    /// The order in which an allocation wanting `wanted` asks the tiers: its own, the untiered,
    /// the other one (every tier, so nothing is refused while any segment has room).
    pub fn asking_order(wanted: Tier) -> [Tier; 3] {
        match wanted {
            Tier::Device => [Tier::Device, Tier::Any, Tier::Host],
            Tier::Host => [Tier::Host, Tier::Any, Tier::Device],
            Tier::Any => [Tier::Any, Tier::Device, Tier::Host],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_at_the_threshold_are_hot_and_smaller_ones_cold() {
        let rule = PlacementRule {
            hot_object_bytes: 4096,
        };
        assert_eq!(rule.tier_for(4096), Tier::Device);
        assert_eq!(rule.tier_for(1 << 30), Tier::Device);
        assert_eq!(rule.tier_for(4095), Tier::Host);
        assert_eq!(PlacementRule::default().tier_for(1), Tier::Device);
    }

    #[test]
    fn every_order_asks_every_tier_once_its_own_first() {
        for wanted in [Tier::Any, Tier::Device, Tier::Host] {
            let order = PlacementRule::asking_order(wanted);
            assert_eq!(order[0], wanted);
            for tier in [Tier::Any, Tier::Device, Tier::Host] {
                assert_eq!(order.iter().filter(|&&t| t == tier).count(), 1);
            }
        }
    }
}
