//! GPU slots: which of the host's GPUs are free, and which GPUs a cell gets.
//!
//! A cell asks for an ordered list of archs (`["sm_86", "sm_89"]`); it gets distinct free GPUs,
//! one per entry, in that order, which becomes its `CUDA_VISIBLE_DEVICES`. A cell that cannot get
//! its GPUs now reserves the free ones it could use, so single-GPU cells queued behind it cannot
//! take them forever: cells needing several GPUs never starve.

use crate::inventory::serves;
use crate::matrix::gpus::split_device;
use crate::record::GpuInfo;

/// Whether `gpu` can be the entry `want` of a cell's list: its arch, and its index when the
/// entry pins a device (`sm_90@1`).
fn fits(gpu: &GpuInfo, want: &str) -> bool {
    let (arch, device) = split_device(want);
    device.is_none_or(|index| index == gpu.index) && serves(&gpu.arch, arch)
}

/// The host's GPUs and which are busy.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    gpus: Vec<GpuInfo>,
    busy: Vec<bool>,
}

impl Slots {
    pub(crate) fn new(gpus: Vec<GpuInfo>) -> Self {
        let busy = vec![false; gpus.len()];
        Slots { gpus, busy }
    }

    pub(crate) fn len(&self) -> usize {
        self.gpus.len()
    }

    pub(crate) fn gpu(&self, slot: usize) -> &GpuInfo {
        &self.gpus[slot]
    }

    /// Picks distinct GPUs for `want` among those `usable` says yes to, greedily in order.
    fn pick(&self, want: &[String], usable: impl Fn(usize) -> bool) -> Option<Vec<usize>> {
        let mut taken: Vec<usize> = Vec::with_capacity(want.len());
        for arch in want {
            let slot = (0..self.gpus.len()).find(|&slot| {
                usable(slot) && !taken.contains(&slot) && fits(&self.gpus[slot], arch)
            })?;
            taken.push(slot);
        }
        Some(taken)
    }

    /// Whether this host could ever serve `want` (when every GPU is free).
    pub(crate) fn can_serve(&self, want: &[String]) -> bool {
        self.pick(want, |_| true).is_some()
    }

    /// Takes GPUs for `want` now, avoiding `reserved` ones; `None` when they are not free.
    pub(crate) fn take(&mut self, want: &[String], reserved: &[bool]) -> Option<Vec<usize>> {
        let taken = self.pick(want, |slot| !self.busy[slot] && !reserved[slot])?;
        for &slot in &taken {
            self.busy[slot] = true;
        }
        Some(taken)
    }

    /// Marks the free GPUs `want` could use as reserved for it.
    pub(crate) fn reserve(&self, want: &[String], reserved: &mut [bool]) {
        let mut claimed = Vec::new();
        for arch in want {
            if let Some(slot) = (0..self.gpus.len()).find(|&slot| {
                !self.busy[slot]
                    && !reserved[slot]
                    && !claimed.contains(&slot)
                    && fits(&self.gpus[slot], arch)
            }) {
                claimed.push(slot);
            }
        }
        for slot in claimed {
            reserved[slot] = true;
        }
    }

    pub(crate) fn release(&mut self, taken: &[usize]) {
        for &slot in taken {
            self.busy[slot] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, arch: &str) -> GpuInfo {
        GpuInfo {
            index,
            name: format!("gpu{index}"),
            arch: arch.to_owned(),
            memory_mib: None,
            uuid: None,
        }
    }

    fn want(archs: &[&str]) -> Vec<String> {
        archs.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn takes_in_asked_order_and_releases() {
        let mut slots = Slots::new(vec![gpu(0, "sm_89"), gpu(1, "sm_86"), gpu(2, "sm_89")]);
        let none = vec![false; 3];
        let taken = slots.take(&want(&["sm_86", "sm_89"]), &none).expect("free");
        assert_eq!(taken, [1, 0]);
        assert_eq!(slots.take(&want(&["sm_86"]), &none), None);
        assert_eq!(slots.take(&want(&["sm_89"]), &none), Some(vec![2]));
        slots.release(&taken);
        assert_eq!(slots.take(&want(&["sm_86"]), &none), Some(vec![1]));
    }

    #[test]
    fn knows_what_it_can_never_serve() {
        let slots = Slots::new(vec![gpu(0, "sm_90"), gpu(1, "sm_90")]);
        assert!(slots.can_serve(&want(&["sm_90", "sm_90"])));
        assert!(!slots.can_serve(&want(&["sm_90", "sm_90", "sm_90"])));
        assert!(!slots.can_serve(&want(&["sm_86"])));
        assert!(slots.can_serve(&[]));
    }

    #[test]
    fn pinned_devices_come_in_the_asked_order() {
        let mut slots = Slots::new(vec![gpu(0, "sm_90"), gpu(1, "sm_90")]);
        let none = vec![false; 2];
        assert!(!slots.can_serve(&want(&["sm_90@2"])));
        assert!(!slots.can_serve(&want(&["sm_89@0"])));
        assert_eq!(
            slots.take(&want(&["sm_90@1", "sm_90@0"]), &none),
            Some(vec![1, 0])
        );
        slots.release(&[0, 1]);
        let first = slots.take(&want(&["sm_90@0"]), &none).expect("free");
        assert_eq!(first, [0]);
        // GPU 0 is busy: a cell pinned to it waits, while an unpinned one takes GPU 1.
        assert_eq!(slots.take(&want(&["sm_90@0"]), &none), None);
        assert_eq!(slots.take(&want(&["sm_90"]), &none), Some(vec![1]));
    }

    #[test]
    fn reservations_keep_gpus_for_a_waiting_cell() {
        let mut slots = Slots::new(vec![gpu(0, "sm_90"), gpu(1, "sm_90")]);
        let mut reserved = vec![false; 2];
        let first = slots.take(&want(&["sm_90"]), &reserved).expect("free");
        // A two-GPU cell cannot start: it reserves the free GPU...
        assert!(slots.take(&want(&["sm_90", "sm_90"]), &reserved).is_none());
        slots.reserve(&want(&["sm_90", "sm_90"]), &mut reserved);
        // ...so a later single-GPU cell cannot take it.
        assert!(slots.take(&want(&["sm_90"]), &reserved).is_none());
        slots.release(&first);
        let reserved = vec![false; 2];
        assert!(slots.take(&want(&["sm_90", "sm_90"]), &reserved).is_some());
    }
}
