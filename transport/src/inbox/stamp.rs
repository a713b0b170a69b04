//! When a peer last made progress, without a read of the fine clock per
//! message: the kernel's coarse monotonic clock (the time of its last
//! tick, read from the vDSO page in a few nanoseconds, where the fine one
//! takes about twenty), turned into an `Instant` that is never earlier
//! than the moment it stands for.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The moment of the call, or later by less than three ticks of the
/// kernel's clock (12 ms at 250 Hz): a deadline counted from it ends that
/// much late. Early only if the kernel's tick itself came more than two
/// ticks late (the coarse clock is behind by less than one tick).
pub(crate) fn stamp() -> Instant {
    match (base(), coarse()) {
        (Some(b), Some(now)) => b.fine + now.saturating_sub(b.coarse) + 2 * b.tick,
        _ => Instant::now(),
    }
}

/// Both clocks read together once, the fine one between two reads of the
/// coarse one that agree: `fine` is then within the tick `coarse` stands
/// for (a thread paused across a tick reads again).
struct Base {
    fine: Instant,
    coarse: Duration,
    /// The coarse clock's resolution: how far it can be behind.
    tick: Duration,
}

fn base() -> Option<&'static Base> {
    static BASE: OnceLock<Option<Base>> = OnceLock::new();
    BASE.get_or_init(|| {
        let tick = resolution()?;
        // A few tries: a tick comes every few ms, the three reads take ns.
        (0..100).find_map(|_| {
            let before = coarse()?;
            let fine = Instant::now();
            (coarse()? == before).then_some(Base {
                fine,
                coarse: before,
                tick,
            })
        })
    })
    .as_ref()
}

#[cfg(target_os = "linux")]
fn coarse() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(target_os = "linux")]
fn resolution() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `coarse`.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let tick = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    // A clock coarser than this is not worth its savings.
    (rc == 0 && tick <= Duration::from_millis(20)).then_some(tick)
}

#[cfg(not(target_os = "linux"))]
fn coarse() -> Option<Duration> {
    None
}

#[cfg(not(target_os = "linux"))]
fn resolution() -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_stamp_is_after_its_moment_by_at_most_three_ticks() {
        let tick = resolution().unwrap_or_default();
        assert!(tick > Duration::ZERO, "no coarse clock here");
        for _ in 0..10_000 {
            let before = Instant::now();
            let s = stamp();
            let after = Instant::now();
            // Early only past a tick more than two ticks late; the test
            // allows one more, for a busy machine.
            assert!(s + tick >= before, "a stamp before its moment");
            assert!(s <= after + 3 * tick, "a stamp more than three ticks late");
        }
    }
}
