//! Liveness-based memory planning: place every temporary buffer at a byte
//! offset in one arena so that buffers live at the same time never share
//! bytes.
//!
//! This is the pure algorithm, shared by the CPU runtime (which places its
//! activations with it) and the Work-Depth analysis (which reports the peak
//! it implies), so neither depends on the other. It is TFLite's "greedy by
//! size" offset assignment: buffers (or in-place groups, see
//! [`Interval::reuse`]) are placed largest first, each in the smallest gap
//! between already-placed buffers whose live ranges overlap it (best fit),
//! or above all of them.

/// One buffer to place: its size and the steps it is live for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Size in bytes (rounded up to the alignment when placed).
    pub bytes: usize,
    /// First step that touches the buffer.
    pub first: usize,
    /// Last step that touches it (inclusive; `>= first`).
    pub last: usize,
    /// Index of another interval whose memory this one may take over in
    /// place: the step that first writes this buffer is the last to read
    /// that one, and reads each element before writing the same element
    /// (an elementwise kernel). Honoured only when the donor ends exactly
    /// at `first`, is at least as large, and gives to no other interval;
    /// otherwise ignored.
    pub reuse: Option<usize>,
}

/// Where each interval lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Byte offset of each interval, in input order (multiples of the
    /// alignment).
    pub offsets: Vec<usize>,
    /// Arena size in bytes: the planned peak.
    pub total_bytes: usize,
    /// How many intervals took over their donor's memory in place.
    pub in_place: usize,
}

fn round_up(b: usize, align: usize) -> usize {
    b.div_ceil(align.max(1)).max(1) * align.max(1)
}

/// Bytes needed when every interval gets its own memory (no reuse): the
/// baseline the plan is compared with.
pub fn naive_bytes(intervals: &[Interval], align: usize) -> usize {
    intervals.iter().map(|t| round_up(t.bytes, align)).sum()
}

/// The largest sum of (aligned) sizes live at one step: no placement can
/// use less, so it measures how close a plan is to optimal.
pub fn lower_bound(intervals: &[Interval], align: usize) -> usize {
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(intervals.len() * 2);
    for t in intervals {
        let b = round_up(t.bytes, align);
        events.push((t.first, true, b));
        events.push((t.last.max(t.first) + 1, false, b));
    }
    // Ends at step s sort before starts at s (`false < true`).
    events.sort_unstable();
    let (mut cur, mut peak) = (0usize, 0usize);
    for (_, start, b) in events {
        if start {
            cur += b;
            peak = peak.max(cur);
        } else {
            cur -= b;
        }
    }
    peak
}

/// Places `intervals` in one arena: overlapping live ranges get disjoint
/// bytes, honoured in-place reuses share their donor's offset, and every
/// offset is a multiple of `align` (0 is treated as 1).
pub fn plan(intervals: &[Interval], align: usize) -> Plan {
    let n = intervals.len();
    // Group in-place chains: group[i] is the representative (the chain's
    // first donor).
    let mut group: Vec<usize> = (0..n).collect();
    let mut donated = vec![false; n];
    let mut in_place = 0;
    // Process takers in order of their first step so chains resolve front
    // to back.
    let mut by_first: Vec<usize> = (0..n).collect();
    by_first.sort_by_key(|&i| (intervals[i].first, i));
    for &i in &by_first {
        let t = &intervals[i];
        let Some(d) = t.reuse else { continue };
        if d >= n || d == i || donated[d] {
            continue;
        }
        let donor = &intervals[d];
        if donor.last != t.first || donor.first >= t.first || donor.bytes < t.bytes {
            continue;
        }
        // The donor's group must not already extend past this step (it
        // would if the donor were itself a taker of a later interval —
        // impossible since donors end here — or shared otherwise).
        donated[d] = true;
        group[i] = group[d];
        in_place += 1;
    }
    // Group extents: [first, last], max size.
    struct G {
        first: usize,
        last: usize,
        bytes: usize,
        offset: usize,
    }
    let mut groups: Vec<Option<G>> = (0..n).map(|_| None).collect();
    for (i, t) in intervals.iter().enumerate() {
        let r = group[i];
        let b = round_up(t.bytes, align);
        let last = t.last.max(t.first);
        match &mut groups[r] {
            Some(g) => {
                g.first = g.first.min(t.first);
                g.last = g.last.max(last);
                g.bytes = g.bytes.max(b);
            }
            None => {
                groups[r] = Some(G {
                    first: t.first,
                    last,
                    bytes: b,
                    offset: 0,
                })
            }
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| groups[i].is_some()).collect();
    // Largest first; ties by earlier start, then index, for determinism.
    order.sort_by_key(|&i| {
        let g = groups[i].as_ref().map_or((0, 0), |g| (g.bytes, g.first));
        (std::cmp::Reverse(g.0), g.1, i)
    });
    let mut placed: Vec<usize> = Vec::with_capacity(order.len());
    let mut total = 0usize;
    for &i in &order {
        let Some(g) = groups[i].as_ref() else {
            continue;
        };
        let (first, last, bytes) = (g.first, g.last, g.bytes);
        // Placed groups live at the same time, by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter_map(|&j| groups[j].as_ref())
            .filter(|h| h.first <= last && first <= h.last)
            .map(|h| (h.offset, h.offset + h.bytes))
            .collect();
        busy.sort_unstable();
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut cursor = 0usize;
        for &(lo, hi) in &busy {
            if lo >= cursor {
                let gap = lo - cursor;
                if gap >= bytes && best.is_none_or(|(s, _)| gap < s) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(hi);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        total = total.max(offset + bytes);
        if let Some(g) = groups[i].as_mut() {
            g.offset = offset;
        }
        placed.push(i);
    }
    let offsets = (0..n)
        .map(|i| groups[group[i]].as_ref().map_or(0, |g| g.offset))
        .collect();
    Plan {
        offsets,
        total_bytes: total,
        in_place,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn iv(bytes: usize, first: usize, last: usize) -> Interval {
        Interval {
            bytes,
            first,
            last,
            reuse: None,
        }
    }

    #[test]
    fn disjoint_lifetimes_share_memory() {
        // a chain a -> b -> c: a and c may share, b must not overlap either.
        let ts = [iv(100, 0, 1), iv(100, 1, 2), iv(100, 2, 3)];
        let p = plan(&ts, 64);
        assert_eq!(p.total_bytes, 256);
        assert_eq!(p.offsets[0], p.offsets[2]);
        assert_ne!(p.offsets[0], p.offsets[1]);
        assert_eq!(naive_bytes(&ts, 64), 384);
        assert_eq!(lower_bound(&ts, 64), 256);
    }

    #[test]
    fn best_fit_picks_the_smallest_gap() {
        // Big buffers at both ends leave gaps; a small one fits the
        // smaller gap.
        let ts = [
            iv(256, 0, 9), // 0..256
            iv(192, 0, 1), // 256..448, free from step 2
            iv(128, 0, 9), // 448..576
            iv(64, 2, 9),  // best fit: inside the freed 256..448
            iv(128, 2, 3), // the rest of that gap
        ];
        let p = plan(&ts, 64);
        check(&ts, &p, 64);
        assert!(p.total_bytes <= naive_bytes(&ts, 64));
        assert_eq!(p.total_bytes, 576);
    }

    #[test]
    fn in_place_reuse_shares_the_donor() {
        let mut ts = vec![iv(4096, 0, 1), iv(4096, 1, 2), iv(4096, 2, 3)];
        ts[1].reuse = Some(0);
        ts[2].reuse = Some(1);
        let p = plan(&ts, 64);
        assert_eq!(p.in_place, 2);
        assert_eq!(p.offsets, vec![0, 0, 0]);
        assert_eq!(p.total_bytes, 4096);
        // Not ending at the taker's first step: ignored.
        let mut ts = vec![iv(4096, 0, 2), iv(4096, 1, 3)];
        ts[1].reuse = Some(0);
        let p = plan(&ts, 64);
        assert_eq!(p.in_place, 0);
        check(&ts, &p, 64);
        // A smaller donor: ignored.
        let mut ts = vec![iv(64, 0, 1), iv(4096, 1, 3)];
        ts[1].reuse = Some(0);
        assert_eq!(plan(&ts, 64).in_place, 0);
        // One donor, two takers: only one gets it.
        let mut ts = vec![iv(64, 0, 1), iv(64, 1, 3), iv(64, 1, 3)];
        ts[1].reuse = Some(0);
        ts[2].reuse = Some(0);
        let p = plan(&ts, 64);
        assert_eq!(p.in_place, 1);
    }

    /// Intervals live at the same time never share bytes, except an
    /// honoured donor and its taker at the handover step.
    fn check(ts: &[Interval], p: &Plan, align: usize) {
        assert_eq!(p.offsets.len(), ts.len());
        for (i, a) in ts.iter().enumerate() {
            assert_eq!(p.offsets[i] % align, 0);
            assert!(p.offsets[i] + a.bytes <= p.total_bytes);
            for (j, b) in ts.iter().enumerate().skip(i + 1) {
                let live = a.first <= b.last && b.first <= a.last;
                let handover = |x: &Interval, y: &Interval| y.first == x.last && x.first < y.first;
                let shared =
                    p.offsets[i] < p.offsets[j] + b.bytes && p.offsets[j] < p.offsets[i] + a.bytes;
                if live && shared {
                    // Only a legal in-place handover may overlap; then the
                    // two live ranges meet in exactly one step.
                    assert!(
                        (b.reuse == Some(i) && handover(a, b))
                            || (a.reuse == Some(j) && handover(b, a)),
                        "intervals {i} {a:?} and {j} {b:?} overlap at {} / {}",
                        p.offsets[i],
                        p.offsets[j]
                    );
                    assert!(a.last.min(b.last) == a.first.max(b.first));
                }
            }
        }
        assert!(p.total_bytes >= lower_bound(ts, align) || ts.iter().any(|t| t.reuse.is_some()));
    }

    proptest! {
        #[test]
        fn live_buffers_never_share_bytes(
            raw in proptest::collection::vec((1usize..5000, 0usize..30, 0usize..8), 0..40),
            reuse in proptest::collection::vec(proptest::option::of(0usize..40), 0..40),
        ) {
            let mut ts: Vec<Interval> =
                raw.iter().map(|&(b, f, l)| iv(b, f, f + l)).collect();
            for (t, r) in ts.iter_mut().zip(&reuse) {
                t.reuse = *r;
            }
            let p = plan(&ts, 64);
            check(&ts, &p, 64);
            prop_assert!(p.total_bytes <= naive_bytes(&ts, 64));
            // Without reuse hints the plan is a valid packing too.
            for t in ts.iter_mut() {
                t.reuse = None;
            }
            let p = plan(&ts, 64);
            check(&ts, &p, 64);
            prop_assert_eq!(p.in_place, 0);
        }
    }
}
