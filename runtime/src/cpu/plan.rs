//! The liveness-based memory planner: [`GreedyPlanner`] overlaps temps
//! whose live ranges are disjoint, using [`dnnc_ir::memplan`] (greedy by
//! size, best-fit offsets, in-place reuse for elementwise kernels).

use super::alloc::{Allocator, ArenaPlan, TempInfo, ALIGN};
use dnnc_ir::memplan::{self, Interval};

/// Places temps with [`dnnc_ir::memplan::plan`]: buffers live at the same
/// time never share bytes, others do, so the arena is close to the largest
/// set of simultaneously live activations rather than their sum.
#[derive(Clone, Copy, Debug, Default)]
pub struct GreedyPlanner;

/// Converts temps to the planner's intervals.
pub fn intervals(temps: &[TempInfo]) -> Vec<Interval> {
    temps
        .iter()
        .map(|t| Interval {
            bytes: t.bytes,
            first: t.first_step,
            last: t.last_step,
            reuse: t.reuse,
        })
        .collect()
}

impl Allocator for GreedyPlanner {
    fn plan(&self, temps: &[TempInfo]) -> ArenaPlan {
        let p = memplan::plan(&intervals(temps), ALIGN);
        ArenaPlan {
            offsets: p.offsets,
            total_bytes: p.total_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planner_overlaps_dead_temps() {
        let t = |buf, bytes, first_step, last_step| TempInfo {
            buf,
            bytes,
            first_step,
            last_step,
            reuse: None,
        };
        let temps = [t(0, 1000, 0, 1), t(1, 1000, 1, 2), t(2, 1000, 2, 3)];
        let p = GreedyPlanner.plan(&temps);
        assert_eq!(p.offsets[0], p.offsets[2]);
        assert_eq!(p.total_bytes, 2048);
        let naive = super::super::PerValueAllocator.plan(&temps);
        assert_eq!(naive.total_bytes, 3072);
    }
}
