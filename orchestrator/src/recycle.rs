//! Exact-size reuse of small-space runs: runs that left the quarantine wait here, one LIFO list
//! per length in units, and a small chunk of the same length takes one back without searching
//! the small space's tree.
//!
//! A run kept here stays allocated in the small space's `OrTree`, so the tree never hands it
//! out twice; the segment gives every kept run back to the tree before it reports the small
//! space full (a kept run is never a reason for an out-of-memory). The units kept are capped, so
//! the free space the tree cannot see stays bounded.
//!
//! Invariants ([`RecycledRuns::check`]): `kept_units` is the sum of the kept runs' lengths and at
//! most the cap; each list holds runs of its own length only.

/// Small-space runs kept for reuse, by length.
#[derive(Clone, Debug)]
pub(crate) struct RecycledRuns {
    /// `by_length[n]`: first units of kept runs of `n` units (index 0 unused).
    by_length: Vec<Vec<u32>>,
    kept_units: usize,
    cap_units: usize,
}

impl RecycledRuns {
    /// Lists for runs of 1..=`max_units` units, keeping at most `cap_units` units in all.
    pub(crate) fn new(max_units: usize, cap_units: usize) -> Self {
        Self {
            by_length: vec![Vec::new(); max_units + 1],
            kept_units: 0,
            cap_units,
        }
    }

    /// The first unit of a kept run of exactly `units` units, taken out of the lists.
    pub(crate) fn take(&mut self, units: usize) -> Option<usize> {
        let unit = self.by_length.get_mut(units)?.pop()?;
        self.kept_units -= units;
        Some(unit as usize)
    }

    /// Keep the run of `units` units from `unit`; `false` (nothing kept) when it is longer than
    /// the lists go, its first unit does not fit the lists' entries, or the cap is reached.
    pub(crate) fn keep(&mut self, unit: usize, units: usize) -> bool {
        let Ok(first) = u32::try_from(unit) else {
            return false;
        };
        if units == 0 || self.kept_units + units > self.cap_units {
            return false;
        }
        let Some(list) = self.by_length.get_mut(units) else {
            return false;
        };
        list.push(first);
        self.kept_units += units;
        true
    }

    /// Every kept run as (first unit, units), emptying the lists.
    pub(crate) fn take_all(&mut self) -> Vec<(usize, usize)> {
        self.kept_units = 0;
        let mut runs = Vec::new();
        for (units, list) in self.by_length.iter_mut().enumerate() {
            runs.extend(list.drain(..).map(|unit| (unit as usize, units)));
        }
        runs
    }

    /// Every kept run as (first unit, units).
    pub(crate) fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.by_length
            .iter()
            .enumerate()
            .flat_map(|(units, list)| list.iter().map(move |&unit| (unit as usize, units)))
    }

    /// Units kept.
    pub(crate) fn kept_units(&self) -> usize {
        self.kept_units
    }

    /// Whether no run is kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.kept_units == 0
    }

    /// Verify the invariants in the module docs.
    pub(crate) fn check(&self) -> Result<(), String> {
        let sum: usize = self.runs().map(|(_, units)| units).sum();
        if sum != self.kept_units {
            return Err(format!(
                "recycled runs hold {sum} units, counted {}",
                self.kept_units
            ));
        }
        if self.kept_units > self.cap_units {
            return Err(format!(
                "recycled runs hold {} units over the cap of {}",
                self.kept_units, self.cap_units
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn takes_back_exactly_the_length_it_was_given_last_first() {
        let mut r = RecycledRuns::new(256, 100);
        assert!(r.keep(10, 4));
        assert!(r.keep(30, 4));
        assert!(r.keep(50, 8));
        assert_eq!(r.take(2), None);
        assert_eq!(r.take(4), Some(30));
        assert_eq!(r.take(4), Some(10));
        assert_eq!(r.take(4), None);
        assert_eq!(r.kept_units(), 8);
        assert_eq!(r.take_all(), vec![(50, 8)]);
        assert!(r.is_empty());
        r.check().unwrap();
    }

    #[test]
    fn refuses_what_it_cannot_keep() {
        let mut r = RecycledRuns::new(256, 10);
        assert!(!r.keep(0, 0), "an empty run");
        assert!(!r.keep(0, 257), "longer than the lists");
        assert!(!r.keep(1 << 40, 1), "a first unit past u32");
        assert!(r.keep(0, 8));
        assert!(!r.keep(100, 4), "over the cap");
        assert!(r.keep(100, 2));
        assert_eq!(r.kept_units(), 10);
        assert_eq!(r.take(300), None, "a length past the lists");
        r.check().unwrap();
    }

    #[derive(Clone, Debug)]
    enum Step {
        Keep(usize, usize),
        Take(usize),
        TakeAll,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0usize..1000, 0usize..20).prop_map(|(u, n)| Step::Keep(u, n)),
            4 => (0usize..20).prop_map(Step::Take),
            1 => Just(Step::TakeAll),
        ]
    }

    proptest! {
        /// Against a model: a list of (unit, units) in keeping order; a take returns the last
        /// kept run of that length.
        #[test]
        fn matches_a_list_model(steps in prop::collection::vec(step(), 0..200)) {
            let (max_units, cap) = (16, 64);
            let mut r = RecycledRuns::new(max_units, cap);
            let mut model: Vec<(usize, usize)> = Vec::new();
            for s in steps {
                match s {
                    Step::Keep(unit, units) => {
                        let held: usize = model.iter().map(|m| m.1).sum();
                        let fits = units > 0 && units <= max_units && held + units <= cap;
                        prop_assert_eq!(r.keep(unit, units), fits);
                        if fits {
                            model.push((unit, units));
                        }
                    }
                    Step::Take(units) => {
                        let expect = model.iter().rposition(|m| m.1 == units);
                        let got = r.take(units);
                        prop_assert_eq!(got, expect.map(|i| model[i].0));
                        if let Some(i) = expect {
                            model.remove(i);
                        }
                    }
                    Step::TakeAll => {
                        let mut all = r.take_all();
                        all.sort_unstable();
                        model.sort_unstable();
                        prop_assert_eq!(&all, &model);
                        model.clear();
                    }
                }
                prop_assert_eq!(r.kept_units(), model.iter().map(|m| m.1).sum::<usize>());
                prop_assert!(r.check().is_ok());
            }
        }
    }
}
